"""Operating the lake: verification against the ground truth, maintenance, time travel and key history, the
smoke run behind `pipeline demo`, and a ready Airflow schedule."""
