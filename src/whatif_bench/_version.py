"""The toolkit version, defined once (recorded in every generated file).

``pyproject.toml`` reads it from here (``[tool.setuptools.dynamic]``); a literal rather than an
``importlib.metadata`` look-up keeps ``whatif --version`` fast.
"""

__version__ = "0.1.0"
