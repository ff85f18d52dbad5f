"""PyTorch runners: training, attention dumps and operator builders (torch imported lazily)."""
