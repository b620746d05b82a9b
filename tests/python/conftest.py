import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("FP8ROUTE_SOURCE_DIR", ROOT)
# The suite checks routing by the table: no automatic probing (test_autoprobe.py turns it on).
os.environ.setdefault("FP8ROUTE_AUTOPROBE", "0")
