"""Test data shared by the unit and e2e suites."""
