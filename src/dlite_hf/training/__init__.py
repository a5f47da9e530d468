"""Training: data regeneration, losses, the DLite trainer."""
