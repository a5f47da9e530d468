"""DLite model code: the files that live beside every checkpoint on the Hub."""
