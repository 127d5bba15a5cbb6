"""The two stages of the data path: `changelog` (every change, appended once) and `mirror` (current state,
merged on a schedule), and `dead_letters` (what the changelog could not land, and its replay)."""
