#!/usr/bin/env python3
"""Totals the JUnit XML reports of one test run (GoogleTest suites and pytest): passed, failed,
skipped, and why skipped."""
import collections
import pathlib
import sys
import xml.etree.ElementTree as ET


def main(folder: str) -> int:
    reports = sorted(pathlib.Path(folder).glob("*.xml"))
    if not reports:
        print(f"test summary: no reports in {folder}")
        return 1
    passed = failed = skipped = 0
    reasons = collections.Counter()
    for report in reports:
        for case in ET.parse(report).getroot().iter("testcase"):
            if case.find("failure") is not None:
                failed += 1
            elif case.get("result") == "skipped" or case.find("skipped") is not None:
                skipped += 1
                node = case.find("skipped")
                msg = (node.get("message") or node.text or "") if node is not None else ""
                if node is not None and msg == "collection skipped" and node.text:  # pytest, module-level skip
                    msg = node.text.split("Skipped: ", 1)[-1]
                    msg = msg[:-2] if msg.endswith("')") else msg
                reasons[msg.strip().splitlines()[-1] if msg.strip() else "(no reason given)"] += 1
            else:
                passed += 1
    for reason, n in reasons.most_common():
        print(f"skipped {n:5d}: {reason}")
    print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
