"""The command line: `python -m pipeline <command>` (`main`), and the failures it reports in one line (`errors`)."""
