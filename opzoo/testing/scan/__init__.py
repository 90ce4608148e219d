"""``opzoo scan``: the Functions of an installed package found, a contract inferred for each by
probing it, and checked, with no declaration written."""
