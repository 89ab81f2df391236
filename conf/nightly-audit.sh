#!/usr/bin/env bash
# The nightly audit of a fleet of stores in one Spark application (one start-up for all): for each store, audit what
# changed since its last clean run, append the findings and a summary row to the Delta history table, write its
# HTML/JSON report; alert when the worst exit code says so. A store that cannot be audited does not stop the others.
#
#   conf/nightly-audit.sh STORES                  STORES: ID=URI entries, comma-separated (see conf/nightly.cron)
#   conf/nightly-audit.sh STORE_ID STORE_URI      one store: the same as STORE_ID=STORE_URI
#
# Each store's report goes to $REPORTS/<date>/<store id>/. The stores of one run share BROKER_CONFIG: brokers
# with other settings get their own cron line.
#
# Environment (defaults in brackets):
#   BROKER_CONFIG []: the broker's broker.conf (segment, ConsumeQueue and IndexFile sizes); empty: RocketMQ's defaults
#   SPARK_MASTER [yarn]  HISTORY [s3a://rmq-audit/history]  REPORTS [s3a://rmq-audit/reports]
#   EXECUTORS [4]  INDEX_MB [420: one IndexFile, 40 + 4*maxHashSlotNum + 20*maxIndexNum bytes, in MB]
#   ALERT_CMD [logger -t rmqstore]: run with a message when the audit finds something (exit 1) or fails (2)
#   DELTA_PACKAGE [io.delta:delta-spark_2.13:4.0.1]: resolved by spark-submit only when the jars of `make jars`
#     are not cached (~/.cache/rmq-store-rebuild/jars, as conf/jars/jars.lock lists them; they are then
#     passed with --jars, S3A included); set it empty to read the
#     history with the deltalake Python package instead (the history is always appended by deltalake)
#   PY_ENV_ARCHIVE []: the packed Python environment of `make dist` (dist/rmqstore-env.tar.gz: the project and
#     numba, pyarrow, rocksdict, deltalake...), unpacked on every node as ./env; empty when the nodes have them
#   AWS_ENDPOINT_URL, AWS_REGION: passed on to the executors (credentials: the nodes' own, e.g. instance roles)
# Many audits append to one history table at once: the driver commits each with deltalake (delta-rs), whose
# conditional writes on S3 lose no commit; no DynamoDB lock table is needed. Never write it with delta-spark.
set -euo pipefail

USAGE="usage: nightly-audit.sh ID=URI[,ID=URI...] | nightly-audit.sh STORE_ID STORE_URI"
STORES=${1:?$USAGE}
if [[ $# -eq 2 ]]; then STORES="$1=$2"; elif [[ $# -ne 1 ]]; then echo "$USAGE" >&2; exit 2; fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SPARK_MASTER=${SPARK_MASTER:-yarn}
HISTORY=${HISTORY:-s3a://rmq-audit/history}
REPORTS=${REPORTS:-s3a://rmq-audit/reports}
INDEX_MB=${INDEX_MB:-420}
EXECUTORS=${EXECUTORS:-4}
ALERT_CMD=${ALERT_CMD:-logger -t rmqstore}
DELTA_PACKAGE=${DELTA_PACKAGE-io.delta:delta-spark_2.13:4.0.1}
REPORT="$REPORTS/$(date -u +%Y-%m-%dT%H%M%SZ)"

# Memory per segment size: a task streams its commitlog segment in 8 MiB chunks and hands rows on in Arrow
# batches, so cluster.conf's 2g JVM per executor holds for any mapedFileSizeCommitLog (256 MiB and 1 GiB
# segments peak the same). What a task holds whole is one IndexFile and its entries: its Python worker
# gets twice the IndexFile plus 512 MB, at least conf/cluster.conf's 1536m.
PYSPARK_MB=$((INDEX_MB * 2 + 512 > 1536 ? INDEX_MB * 2 + 512 : 1536))

# the project's packages (and report.html's template) for the executors, and its Python environment when the nodes
# lack one
(cd "$ROOT" && rm -f /tmp/rmqstore-$$.zip && zip -qr /tmp/rmqstore-$$.zip jobs storelib udfs -i '*.py' '*.html')
trap 'rm -f /tmp/rmqstore-$$.zip' EXIT
py_opts=(--py-files /tmp/rmqstore-$$.zip)
if [[ -n "${PY_ENV_ARCHIVE:-}" ]]; then
  py_opts+=(--archives "$PY_ENV_ARCHIVE#env" --conf spark.pyspark.python=./env/bin/python)
fi

delta_opts=()
if (cd "$ROOT" && python3 -m jobs.runtime.jars --check >/dev/null); then
  read -ra delta_opts <<<"$(cd "$ROOT" && python3 -m jobs.runtime.jars --submit-args)"
elif [[ -n "$DELTA_PACKAGE" ]]; then
  delta_opts=(--packages "$DELTA_PACKAGE"
    --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension
    --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog)
fi
for var in AWS_ENDPOINT_URL AWS_REGION; do
  if [[ -n "${!var:-}" ]]; then delta_opts+=(--conf "spark.executorEnv.$var=${!var}"); fi
done

set +e
spark-submit \
  --master "$SPARK_MASTER" --deploy-mode client \
  --name "rmqstore-nightly-audit" \
  --properties-file "$ROOT/conf/cluster.conf" \
  --num-executors "$EXECUTORS" \
  --conf spark.executor.memoryOverhead=$((PYSPARK_MB + 512))m \
  --conf spark.executor.pyspark.memory="${PYSPARK_MB}m" \
  --conf spark.sql.shuffle.partitions=$((EXECUTORS * 2 * 4)) \
  "${py_opts[@]}" "${delta_opts[@]}" \
  "$ROOT/jobs/audit.py" \
  --stores "$STORES" ${BROKER_CONFIG:+--broker-config "$BROKER_CONFIG"} \
  --history "$HISTORY" --since-last \
  --report "$REPORT"
code=$?
set -e

case $code in
  0) echo "rmqstore nightly audit: every store clean (reports in $REPORT)" ;;
  1) $ALERT_CMD "rmqstore nightly audit: findings, see $REPORT/<store id>/report.html" ;;
  *) $ALERT_CMD "rmqstore nightly audit: a store could not be audited (exit $code), see the job log" ;;
esac
exit $code
