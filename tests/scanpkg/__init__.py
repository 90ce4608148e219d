"""A package for tests/test_scan.py: Functions of every kind `opzoo scan` meets, correct ones
(ops.py) and a wrong twin of each one it infers (wrong.py), and modules whose import fails (broken.py),
ends the process (exits.py) or changes torch's default dtype (dtype.py)."""
