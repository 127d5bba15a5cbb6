# The two commands a data engineer needs: `make demo` and `make test`. Both set up what is missing first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP_STAMP := $(VENV)/.installed

.PHONY: setup system-packages demo demo-trino demo-cluster demo-postgres test unit test-stack-up test-stack-down bench soak stack-up stack-down clean

$(PIP_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# Instant when the jars are already resolved for the checked-in poms.
setup: $(PIP_STAMP)
	$(PY) -m pipeline setup

# Debian's packages the suite and `demo-postgres` run: PostgreSQL (the real source under Debezium) and Chromium
# (the status page test). Installed with apt-get when missing, as root or through sudo; nothing to do when present.
system-packages:
	@missing=""; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || missing="$$missing postgresql"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  command -v apt-get >/dev/null || { echo "install$$missing with this system's package manager"; exit 1; }; \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  echo "installing Debian packages:$$missing"; \
	  $$sudo apt-get update -qq && $$sudo apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# The pipeline end to end on the MoMA tables: simulate -> changelog -> mirror -> verify against the truth. The
# mirror needs no mirror.keys: each changelog table keeps its Debezium record key (docs/mirror.md).
DEMO := $(PY) -m pipeline --set mirror.tables=moma_artists,moma_artworks \
	--set changelog.checkpoint=.pipeline/checkpoints/demo
DEMO_TRUTH := .pipeline/truth/demo.db

demo: setup
	$(PY) -m pipeline stack up
	$(PY) -m pipeline demo
	rm -f $(DEMO_TRUTH)
	$(DEMO) simulate --tables moma --events 5000 --snapshot-rows 500 --duplicates 0.02 --reorder 0.05 \
		--evolve-at 2500 --truth $(DEMO_TRUTH)
	$(DEMO) changelog --topic-pattern 'moma\..*' --until-caught-up
	$(DEMO) mirror
	$(DEMO) history --table moma_artists --key 1
	$(DEMO) verify --truth $(DEMO_TRUTH)

# After `make demo`: the same MoMA topics landed again in Glue mode, on the stack's moto (Glue and S3, in the
# bucket the demo's smoke path made), as Athena's lake would be; then Trino, Athena's engine, reads it: the views
# created through it as Athena keeps them, the mirrors verified through them, and one query answered by Trino.
TRINO_DEMO := $(PY) -m pipeline --set catalog.type=glue --set catalog.warehouse=s3://demo-landing/lake \
	--set mirror.tables=moma_artists,moma_artworks --set changelog.checkpoint=.pipeline/checkpoints/demo-glue
demo-trino: setup
	$(PY) -m pipeline stack up --with trino
	$(TRINO_DEMO) changelog --topic-pattern 'moma\..*' --until-caught-up
	$(TRINO_DEMO) mirror
	$(TRINO_DEMO) views --engine trino > /dev/null
	$(TRINO_DEMO) verify --engine trino --truth $(DEMO_TRUTH)
	$(TRINO_DEMO) query --engine trino \
		'SELECT nationality, count(*) AS artists FROM "mirror"."moma_artists_current" GROUP BY 1 ORDER BY 2 DESC LIMIT 5'
# After `make demo`: the same MoMA topics on the stack's Spark standalone cluster (a master and two workers, each
# executor a JVM of its own), every stage submitted with spark-submit from what `pipeline package --environment`
# wrote (the executors' Python a packed virtualenv); tables and checkpoints on moto's S3 and Glue, in namespaces of
# their own. The keys are moto's; on AWS the nodes' role serves.
CLUSTER_DEMO := $(PY) -m pipeline --set catalog.type=glue --set catalog.warehouse=s3://demo-landing/cluster \
	--set changelog.checkpoint=s3a://demo-landing/cluster/checkpoints --set changelog.namespace=cluster_changelog \
	--set mirror.namespace=cluster_mirror --set mirror.pending_namespace=cluster_pending \
	--set mirror.tables=moma_artists,moma_artworks --set 'changelog.topic_pattern=moma\..*'
SUBMIT := AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test .pipeline/package/submit.sh
demo-cluster: setup
	$(PY) -m pipeline stack up --with spark-cluster
	$(CLUSTER_DEMO) package --environment
	$(SUBMIT) changelog --until-caught-up
	$(SUBMIT) mirror
	$(SUBMIT) maintain
	$(SUBMIT) verify --truth $(abspath $(DEMO_TRUTH))

# The same path on a real source: PostgreSQL -> Debezium's connector on Kafka Connect (Apicurio's converter as
# seed 002 configures it) -> changelog -> mirror -> the mirrors against SELECT * (0 mismatches expected).
# Each run has its own connector, topics and lake tables, so it can be repeated.
PG_RUN    := $(shell date +%s)
PG_PREFIX := pgdemo$(PG_RUN)
PG_DEMO   := $(PY) -m pipeline --set mirror.keys.$(PG_PREFIX)_customers=id \
	--set mirror.keys.$(PG_PREFIX)_orders=order_id --set mirror.tables=$(PG_PREFIX)_customers,$(PG_PREFIX)_orders \
	--set changelog.checkpoint=.pipeline/checkpoints/$(PG_PREFIX)

demo-postgres: setup system-packages
	$(PY) -m pipeline stack up --with postgres
	$(PY) -m simulators.postgres create
	$(PY) -m pipeline.stack.debezium register demo_$(PG_RUN) --prefix $(PG_PREFIX)
	$(PY) -m simulators.postgres run --operations 500 --connector demo_$(PG_RUN)
	$(PY) -m pipeline.stack.debezium delete demo_$(PG_RUN)
	$(PG_DEMO) changelog --topic-pattern '$(PG_PREFIX)\..*' --until-caught-up
	$(PG_DEMO) mirror
	$(PY) -m simulators.postgres compare --prefix $(PG_PREFIX)

# Two workers, each with a stack and a Spark of its own; each module runs whole on one of them
# (tests/conftest.py orders them longest first). TEST_WORKERS=0 runs everything in this one process.
TEST_WORKERS ?= 2
test: setup system-packages
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

unit: $(PIP_STAMP)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

# The test session's stack, kept up between runs: `$(PY) -m pytest tests/integration/test_x.py` then starts
# only its Spark session (docs/testing.md).
test-stack-up: setup
	$(PY) -m tests.stack up

test-stack-down:
	$(PY) -m tests.stack down

bench: setup
	$(PY) bench/stack.py
	$(PY) bench/s3_sqs.py
	$(PY) bench/kinesis.py
	$(PY) bench/mirror.py
	$(PY) bench/query.py
	$(PY) -m pipeline stack up
	$(PY) bench/simulate.py
	$(PY) bench/changelog.py

# The changelog stage SIGKILLed 20 times over 1M Debezium events with duplicates and reordering, then caught up,
# mirrored and verified (bench/soak.py; SOAK_ARGS="--events 20000 --kills 4" for a short one).
soak: setup
	$(PY) -m pipeline stack up
	$(PY) bench/soak.py $(SOAK_ARGS)

stack-up: setup
	$(PY) -m pipeline stack up

stack-down:
	$(PY) -m pipeline stack down

clean: stack-down
	rm -rf .pipeline $(VENV)
