"""`python -m pipeline …`: one entry point for setup, the service stack and the jobs."""

from __future__ import annotations

import argparse
import sys
import traceback
from typing import Callable, Sequence

from pipeline.cli.commands import EXIT_FAILED, EXIT_USAGE
from pipeline.cli.parser import build_parser
from pipeline.config.redaction import redact_text
from pipeline.config.settings import ConfigError, PipelineConfig, load_config
from pipeline.runtime import logs


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logs.configure(args.log_level, args.log_format, verbose=args.verbose)
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(redact_text(f"configuration error: {exc}"), file=sys.stderr)
        return EXIT_USAGE
    cfg = _console_level(cfg, args)
    handler: Callable[[PipelineConfig, argparse.Namespace], int] = args.handler
    try:
        return handler(cfg, args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # every known failure carries a message that says what to do
        from pipeline.cli.errors import KNOWN_ERRORS

        if isinstance(exc, KNOWN_ERRORS):
            print(redact_text(f"error: {exc}"), file=sys.stderr)
        else:  # a bug: its traceback helps, its message may quote a secret
            print(redact_text(traceback.format_exc()), file=sys.stderr, end="")
        return EXIT_FAILED


def _console_level(cfg: PipelineConfig, args: argparse.Namespace) -> PipelineConfig:
    """`--log-level DEBUG` shows Spark's INFO lines on the console, `--verbose` its warnings."""
    level = "INFO" if args.log_level == "DEBUG" else "WARN" if args.verbose else None
    if level is None:
        return cfg
    return cfg.model_copy(update={"spark": cfg.spark.model_copy(update={"console_log_level": level})})
