"""Training: the DLite trainer, its arguments, losses and metrics (the data pipeline is `dlite_hf.data`)."""
