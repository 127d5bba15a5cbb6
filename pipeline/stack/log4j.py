"""The log4j2 configuration the Kafka JVMs (broker, Connect worker) share: everything to their log file."""

from __future__ import annotations

from pathlib import Path


def write_log_config(folder: Path) -> Path:
    """log4j2 to stdout (the service's log file) for the Kafka JVMs, the broker's chatty state logger quieted."""
    path = folder / "log4j2.properties"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "rootLogger.level = INFO\nrootLogger.appenderRef.stdout.ref = STDOUT\n"
        "appender.stdout.type = Console\nappender.stdout.name = STDOUT\n"
        "appender.stdout.layout.type = PatternLayout\n"
        "appender.stdout.layout.pattern = [%d] %p %m (%c)%n\n"
        "logger.kafka.name = kafka\nlogger.kafka.level = INFO\n"
        "logger.state.name = state.change.logger\nlogger.state.level = WARN\n"
    )
    return path
