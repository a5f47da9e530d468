"""The target's training features (:mod:`.transformers`) and their on-disk cache (:mod:`.cache`)."""
