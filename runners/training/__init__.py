"""Our own models and their training: the SAAB encoder and masked structure modelling, presets, sweeps,
evaluation, initialisation probes, length and overhead runs, the MoFA GPTs and their domains.
"""
