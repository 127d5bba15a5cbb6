"""An Airflow DAG that runs the mirror every 15 minutes, then maintenance nightly.

Copy this file into the DAGs folder and set PIPELINE_HOME / PIPELINE_CONFIG for the worker. Exit code 75
(a concurrent run won every commit attempt) is retried; any other failure fails the task.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow import DAG
from airflow.operators.bash import BashOperator

PIPELINE = "cd ${PIPELINE_HOME:-.} && python -m pipeline --log-format json"

with DAG(
    dag_id="cdc_lakehouse_mirror",
    schedule=timedelta(minutes=15),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # runs of one table never overlap; a second one would only retry its commits
    default_args={"retries": 3, "retry_delay": timedelta(minutes=2)},
    tags=["cdc", "lakehouse"],
) as mirror_dag:
    BashOperator(task_id="mirror", bash_command=f"{PIPELINE} mirror")

with DAG(
    dag_id="cdc_lakehouse_maintain",
    schedule="30 2 * * *",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["cdc", "lakehouse"],
) as maintain_dag:
    BashOperator(task_id="maintain", bash_command=f"{PIPELINE} maintain")
