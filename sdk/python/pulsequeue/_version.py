# The version of pulse's modules this SDK ships with (scripts/modversion.sh,
# without its "v"); tests/test_packaging.py holds the two together.
__version__ = "0.1.0"
