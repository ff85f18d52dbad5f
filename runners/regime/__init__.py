"""Operators of the regime analysis: the sublayer and its closed forms (``sublayer``), the grid of operating
points (``grid``), pretrained checkpoints' layers rebuilt and proven (``pretrained``), and the hand-written GGUF
reader kept as their independent check (``gguf_llama``).
"""
