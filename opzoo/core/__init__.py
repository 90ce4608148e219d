"""The registry core: what an op is (its contract, params, signature, how its forward takes
arguments) and where ops come from (entry points, pluggy hooks, plugins imported under guard)."""
