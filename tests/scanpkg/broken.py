"""A module whose import raises (a missing optional dependency, as upstream packages have)."""

import scanpkg_missing_dependency  # noqa: F401
