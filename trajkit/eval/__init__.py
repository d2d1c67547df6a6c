"""trajkit.eval: pass@k (``passk.py``), tool-call accuracy BFCL-style (``toolcall.py``, ``tools.py``, ``bfcl.py``), diversity."""
