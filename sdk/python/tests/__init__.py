import logging
import os

# The SDK logs what a worker meets (lost streams, refused results) at
# warning level; the tests provoke those on purpose. PULSE_SDK_TEST_LOG=1
# shows them.
if os.environ.get("PULSE_SDK_TEST_LOG") != "1":
    logging.getLogger("pulsequeue").addHandler(logging.NullHandler())
    logging.getLogger("pulsequeue").propagate = False
