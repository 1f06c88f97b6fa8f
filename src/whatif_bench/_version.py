"""The toolkit version, defined once (recorded in every generated file)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("whatif-bench")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
