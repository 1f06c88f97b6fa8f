"""Placeholder sub-package; see the open issues."""
