"""Browser test helpers: a JupyterLab server on loopback and the notebook tests/test_browser.py runs."""
