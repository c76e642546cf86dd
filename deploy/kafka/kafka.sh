#!/usr/bin/env bash
# A single-node Apache Kafka broker (KRaft, broker+controller) on 127.0.0.1 for the demo, tests and CI.
#
#   deploy/kafka/kafka.sh start|stop|status|fetch|reset
#
# The pinned release (pom.xml) is resolved once from Maven Central into $DREAM_KAFKA_HOME/jars;
# the log dir is formatted once; `start` waits until the broker answers on its port.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
home="${DREAM_KAFKA_HOME:-$root/.cache/kafka}"
port="${DREAM_KAFKA_PORT:-9092}"
cport="${DREAM_KAFKA_CONTROLLER_PORT:-9093}"
jars="$home/jars"
data="$home/data"
pidfile="$home/kafka.pid"
logfile="$home/kafka.log"
props="$home/server.properties"

fetch() {
  if [ -f "$jars/.complete" ] && cmp -s "$here/pom.xml" "$jars/.pom"; then return 0; fi
  command -v mvn >/dev/null || { echo "kafka.sh: maven (mvn) is needed to fetch Kafka" >&2; exit 1; }
  command -v java >/dev/null || { echo "kafka.sh: java 17+ is needed to run Kafka" >&2; exit 1; }
  rm -rf "$jars"; mkdir -p "$jars"
  echo "kafka.sh: resolving Apache Kafka from Maven Central into $jars"
  mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$jars"
  cp "$here/pom.xml" "$jars/.pom"; touch "$jars/.complete"
}

write_props() {
  mkdir -p "$data"
  cat > "$props" <<PROPS
process.roles=broker,controller
node.id=1
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.quorum.bootstrap.servers=127.0.0.1:$cport
inter.broker.listener.name=PLAINTEXT
log.dirs=$data
num.partitions=4
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
log.retention.hours=-1
PROPS
}

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

ready() { (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && grep -q "Kafka Server started" "$logfile" 2>/dev/null; }

start() {
  if running; then echo "kafka.sh: already running (pid $(cat "$pidfile")) on 127.0.0.1:$port"; return 0; fi
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "kafka.sh: something already listens on 127.0.0.1:$port (another checkout's broker?); using it"; return 0
  fi
  fetch
  write_props
  local cp="$jars/*"
  if [ ! -f "$data/meta.properties" ]; then
    java -cp "$cp" kafka.tools.StorageTool format --standalone -t "$(java -cp "$cp" kafka.tools.StorageTool random-uuid)" -c "$props" >/dev/null
  fi
  : > "$logfile"
  nohup java -Xms256m -Xmx768m -XX:+UseG1GC -Dlog4j2.configurationFile="$here/log4j2.yaml" \
    -cp "$cp" kafka.Kafka "$props" >>"$logfile" 2>&1 &
  echo $! > "$pidfile"
  for _ in $(seq 1 120); do
    if ready; then echo "kafka.sh: Kafka ready on 127.0.0.1:$port (pid $(cat "$pidfile"))"; return 0; fi
    running || { echo "kafka.sh: broker exited; last log lines:" >&2; tail -20 "$logfile" >&2; exit 1; }
    sleep 0.5
  done
  echo "kafka.sh: broker not ready after 60 s; see $logfile" >&2; exit 1
}

stop() {
  if running; then
    local pid; pid="$(cat "$pidfile")"
    kill "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
    echo "kafka.sh: stopped"
  fi
  rm -f "$pidfile"
}

case "${1:-}" in
  fetch) fetch ;;
  start) start ;;
  stop) stop ;;
  status) if running; then echo "running (pid $(cat "$pidfile")) on 127.0.0.1:$port"; else echo "stopped"; exit 1; fi ;;
  reset) stop; rm -rf "$data" ;;
  *) echo "usage: $0 start|stop|status|fetch|reset" >&2; exit 2 ;;
esac
