"""Pretrained checkpoints: the one loader (``load``), the attention seam, what discovery finds of a model
(``families``), fielding records with a model's own tokenizer, and capture.
"""
