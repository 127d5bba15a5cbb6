# The pipeline image: Python 3.11, a Java 17 runtime for Spark, Maven to resolve the connector jars at build time.
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless maven \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY pipeline pipeline
COPY cdc cdc
COPY tables tables
COPY registry registry
COPY simulators simulators
COPY jvm jvm
RUN pip install --no-cache-dir -e . && python -m pipeline --set jars=/opt/pipeline/jars setup
ENV PIPELINE_JARS=/opt/pipeline/jars
# spark-class and spark-submit of the installed PySpark, for the compose file's Spark cluster
ENV PATH="/usr/local/lib/python3.11/site-packages/pyspark/bin:${PATH}" SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark SPARK_SCALA_VERSION=2.13
ENTRYPOINT ["python", "-m", "pipeline"]
