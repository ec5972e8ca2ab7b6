"""Pure checks: functions that yield findings from a parsed header, the listed size and samples."""
