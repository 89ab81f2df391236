"""The broker's rules: settings (broker.conf), dispatch, segments' ends, the next start, and what differs per
release."""
