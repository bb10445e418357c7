"""Command line: options → Config → API call → summary.  No logic lives here.

Exit codes: 0 success · 1 failure · 2 bad configuration, usage, manifest or output state ·
3 too many rejects · 130 interrupted (Ctrl-C) · 143 terminated (SIGTERM); after either,
rerun the same command to resume.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from . import __version__, interrupts
from .atomic import check_output_file, write_json_atomic
from .config import Config, load_config
from .config.settings import example_file, flags, overrides_of
from .errors import ConfigError, OutputStateError, ShardsmithError, Terminated, TooManyRejectsError
from .ops.report import (
    pack_report,
    pack_summary,
    reject_budget_exceeded,
    reject_lines,
    stage_summary,
    verify_summary,
    version_log,
)
from .storage import ObjectPath, SecretFilter
from .text import human_bytes, plural, printable

if TYPE_CHECKING:
    from .insight.named_source import Originals

EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


def _fail_cleanly(command: Callable) -> Callable:
    """Turn our exceptions into one clear line on stderr and the documented exit code."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            interrupts.release()  # held since the start: one that came meanwhile is raised here
            return command(*args, **kwargs)
        except ShardsmithError as exc:
            _fail(str(exc), exc.exit_code)
        except KeyboardInterrupt as exc:
            name = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
            _fail(f"{name}; finished work is kept, rerun the same command to resume",
                  EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED)
        except OSError as exc:  # the file system: full, read-only, permissions, gone
            _fail(storage_error(exc), 1)
        except MemoryError:  # a 43-line traceback before, for --draws under a memory limit
            _fail("out of memory: ask for less (e.g. fewer --draws) or allow this process "
                  "more memory", 1)

    return wrapper


class _Dataset(click.Path):
    """A dataset directory, or an ``s3://`` URL (checked by ``storage.locate``, not here)."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, str) and value.startswith("s3://"):
            return value
        return super().convert(value, param, ctx)


_storage_option = click.option(
    "--storage", "storage_options", multiple=True, metavar="KEY=VALUE",
    help="For an s3:// dataset: endpoint_url, region, key, secret, token, profile or anon, "
         "over the job file's storage: section (default: the AWS variables, "
         "AWS_ENDPOINT_URL for MinIO).")


_config_option = click.option(
    "--config", "config_file", type=click.Path(dir_okay=False),
    help="The job file: its output.path is the dataset (when DATASET is not given), its "
         "storage: section reaches an s3:// one (--storage over it).")


_source_option = click.option(
    "--source", "named_source", metavar="DIR|s3://...",
    help="Where the originals are (the folder or URL packed from): rejected originals and "
         "--quality are read only under a source named here or in a --config job file, never "
         "under the one the dataset records.")


def _options(pairs: tuple[str, ...]) -> dict[str, str] | None:
    from .storage import parse_options

    return parse_options(pairs) or None


def _dataset_at(dataset: str | None, config_file: str | None, pairs: tuple[str, ...],
                named_source: str | None = None) -> tuple[Path | ObjectPath, Config | None]:
    """Where a command's DATASET is, and the job file when one was given: the argument, else
    the job file's ``output.path``; an ``s3://`` dataset is reached as ``pack`` reaches it,
    through the job file's ``storage:`` section with ``--storage`` over it.  ``--storage``
    with a local dataset is refused, unless it serves an ``s3://`` ``--source``
    (``named_source``); the section is then left unused (it may be the source's)."""
    from .storage import is_url, location

    options = _options(pairs)
    config = None
    if config_file is not None:
        config = load_config(config_file, _storage_settings(pairs))
        dataset = dataset or config.output.path
        if is_url(dataset):
            options = config.storage.options() or None
    if not dataset:
        raise ConfigError("output.path: no dataset given (argument DATASET or --config)")
    if not is_url(dataset) and is_url(named_source or ""):
        options = None  # the --storage options are the source's: a folder needs none
    return location(dataset, options), config


def _originals(named_source: str | None, config: Config | None, pairs: tuple[str, ...],
               recorded: str = "") -> Originals:
    """Where originals may be read: under ``--source``, else under the job file's
    ``source.path`` (through its ``storage:`` section, ``--storage`` over it), never under
    the source the dataset ``recorded`` (only quoted in the note when nothing is named)."""
    from .insight.named_source import named_originals

    storage = _options(pairs)
    if not named_source and config is not None:  # the job file names the source packed from
        named_source = config.source.path
        storage = {**config.storage.options(), **(storage or {})} or None
    return named_originals(named_source, recorded, storage)


def _fail(message: str, code: int) -> None:
    _echo(f"shardsmith: error: {printable(message)}", err=True)  # a newline in it, too
    sys.exit(code)


def _echo(text: str, err: bool = False, nl: bool = True) -> None:
    """Print what a command composed: it quotes paths and manifest strings that come from
    elsewhere, so every control character but our own line breaks is shown escaped."""
    click.echo(printable(text, keep_newlines=True), err=err, nl=nl)


class _PrintableFormatter(logging.Formatter):
    """Log lines quote paths and manifest strings too: escaped as ``_echo`` does."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record), keep_newlines=True)


def storage_error(exc: OSError) -> str:
    """One line for a file system error: the file, what went wrong, what to do."""
    where = f"{exc.filename}: " if exc.filename else ""
    reason = exc.strerror or str(exc)
    full = "free some space and rerun: finished work is kept"
    hint = {errno.ENOSPC: full, errno.EDQUOT: full, errno.EACCES: "check the permissions",
            errno.EROFS: "the file system is read-only"}.get(exc.errno, "")
    return f"{where}{reason}" + (f" ({hint})" if hint else "")


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


class _UsageLine(click.ClickException):
    """A usage error as one line in the house format, where click would print three."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        _echo(f"shardsmith: error: {printable(self.message)}", err=True)


def usage_line(exc: click.UsageError, command: str | None) -> str:
    """What was wrong with the command line of ``command`` (None: the group's own), naming
    the option (or argument) and the value, and where to look: ``--quality: 'nan' is not a
    valid integer (pack --help lists the options)``."""
    message = _lower_first(exc.message.strip().rstrip("."))
    if isinstance(exc, click.MissingParameter) and exc.param is not None:
        what = "option" if isinstance(exc.param, click.Option) else "argument"
        message = f"{_parameter_name(exc.param)}: a required {what}, not given"
    elif isinstance(exc, click.BadParameter) and exc.param is not None:
        message = f"{_parameter_name(exc.param)}: {message}"
    elif isinstance(exc, click.NoSuchOption):
        message = f"{exc.option_name}: no such option"
        if exc.possibilities:
            message += f" (did you mean {' or '.join(sorted(exc.possibilities))}?)"
    elif isinstance(exc, click.BadOptionUsage):
        message = f"{exc.option_name}: " + message.replace(f"option '{exc.option_name}' ", "")
    if command is None:
        return f"{_lower_first(message)} (shardsmith --help lists the commands)"
    return f"{_lower_first(message)} ({command} --help lists the options)"


def _parameter_name(parameter: click.Parameter) -> str:
    if isinstance(parameter, click.Option):
        return max(parameter.opts, key=len)  # --output rather than -o
    return parameter.human_readable_name


def _lower_first(message: str) -> str:
    """"No such command" reads "no such command" after a colon; "DATASET" stays."""
    if len(message) > 1 and message[0].isupper() and not message[1].isupper():
        return message[0].lower() + message[1:]
    return message


class _Commands(click.Group):
    """The command group: a usage error of any command is one line on stderr and exit 2,
    as the project's own checks are; ``--help`` and a bare ``shardsmith`` print the help."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        with _one_line_usage({}):
            return super().make_context(*args, **kwargs)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        name, command, rest = super().resolve_command(ctx, args)
        ctx.meta["shardsmith.command"] = name  # a parse error of its own may lack its context
        return name, command, rest

    def invoke(self, ctx: click.Context) -> Any:
        with _one_line_usage(ctx.meta):
            return super().invoke(ctx)


@contextlib.contextmanager
def _one_line_usage(meta: dict[str, Any]):
    try:
        yield
    except click.exceptions.NoArgsIsHelpError:
        raise
    except click.UsageError as exc:
        raise _UsageLine(usage_line(exc, meta.get("shardsmith.command"))) from exc


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="shardsmith")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def main(verbose: int) -> None:
    """Turn a tree of huge images into training-ready WebDataset or TFRecord shards."""
    level = logging.WARNING - 10 * min(verbose, 2)
    handler = logging.StreamHandler()
    handler.setFormatter(_PrintableFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    # -vv lets botocore and s3fs dump requests (headers, token, endpoint): scrubbed here.
    handler.addFilter(SecretFilter())
    logging.basicConfig(level=level, handlers=[handler])
    # cron, systemd and Kubernetes stop a job with SIGTERM: clean up as for Ctrl-C.
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _raise_terminated)


def setting_options(root: type = Config) -> Callable[[Callable], Callable]:
    """The options that override settings, made from their declarations on the config
    dataclasses (``config.declare``): each fills a keyword parameter named after its key."""

    def decorate(command: Callable) -> Callable:
        for flag in reversed(flags(root)):  # click lists options in decorator order
            if flag.kind is bool:
                option = click.option(flag.flag, flag.parameter, is_flag=True, default=None,
                                      help=flag.help)
            else:
                kind = click.Choice(flag.choices) if flag.choices else flag.kind
                option = click.option(flag.flag, flag.parameter, type=kind, help=flag.help,
                                      metavar=flag.metavar or None)
            command = option(command)
        return command

    return decorate


@main.command()
@click.argument("source", required=False, type=click.Path(file_okay=False))
@click.argument("output", required=False, type=click.Path(file_okay=False))
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="YAML config file (`shardsmith init-config > job.yaml` writes one with "
              "every key and its default); options below override it.")
@setting_options()
@click.option("--report", "report_file", type=click.Path(dir_okay=False),
              help="Also write a machine-readable summary (JSON) here, on success or failure.")
@click.option("--dry-run", is_flag=True,
              help="Scan and plan only: counts per class and split, bytes in, expected shards. "
              "Writes nothing (the output directory is not even created).")
@click.option("--probe", "with_probe", is_flag=True,
              help="With --dry-run: also measure the storage and the CPU on a sample "
              "(as `shardsmith probe`) and estimate the time.")
@_storage_option
@_fail_cleanly
def pack(source, output, config_file, report_file, dry_run, with_probe, storage_options,
         **settings) -> None:
    """Pack the images under SOURCE into shards and a manifest in OUTPUT.

    SOURCE and OUTPUT may come from the config file (source.path, output.path) instead.
    Rerunning a finished pack with the same settings does nothing; rerunning an interrupted
    one resumes it.
    """
    from .insight.inspection import (
        count_objects,
        findings_lines,
        findings_report,
        object_json,
        object_lines,
        pack_findings,
    )
    from .packing.pipeline import pack as run_pack

    if with_probe and not dry_run:
        raise click.UsageError("--probe goes with --dry-run")
    if report_file is not None:  # a link or a FIFO is refused before any work, not after
        check_output_file(report_file, folder=False)  # a missing folder: a warning at the end
    with _report_to(report_file) as report:
        config = load_config(config_file, {"source.path": source, "output.path": output}
                             | overrides_of(settings) | _storage_settings(storage_options))
        if dry_run:
            _dry_run(config, with_probe, report)
            return
        result = run_pack(config)
        report.update(pack_report(result))
        _echo(pack_summary(result))
        # An unchanged dataset was summed up when it was packed.
        census = None if result.up_to_date else pack_findings(result.output, result.manifest)
        if census is not None:
            report["findings"] = findings_report(census)
            for line in findings_lines(census, result.output):
                _echo(line)
        objects = None if result.up_to_date else count_objects(result.output, result.manifest)
        if objects is not None:
            report["objects"] = object_json(objects, result.manifest)
            _echo("\n".join("  " + line for line in object_lines(objects, result.manifest)))
        if result.manifest.rejects and not config.run.quiet and not result.up_to_date:
            _echo("rejected files:", err=True)
            _echo("\n".join(reject_lines(result.manifest.rejects)), err=True)
        if result.reject_fraction > config.run.max_reject_fraction:
            raise TooManyRejectsError(
                reject_budget_exceeded(result, config.run.max_reject_fraction))


def _storage_settings(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``--storage KEY=VALUE`` as settings of the job's ``storage:`` section, over the job
    file's (like its other options; never in the manifest or the fingerprint)."""
    from .storage import flag

    return {f"storage.{name}": flag(value) if name == "anon"
            else value for name, value in (_options(pairs) or {}).items()}


def _dry_run(config: Config, with_probe: bool, report: dict[str, Any]) -> None:
    """Print the dry run and put it in the report; exit 3 where the pack would."""
    from .probe import ProbeOptions
    from .probe.dryrun import dry_run
    from .probe.text import dry_run_json, dry_run_table

    result = dry_run(config, ProbeOptions() if with_probe else None,
                     None if config.run.quiet else _say)
    _echo(dry_run_table(result))
    report["dry_run"] = dry_run_json(result)
    if result.refusal is not None:
        raise TooManyRejectsError(f"dry run: {result.refusal}")


def _say(line: str) -> None:
    _echo(f"shardsmith: {line} ...", err=True)


@main.command()
@click.argument("source", required=False, type=click.Path(file_okay=False))
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="The job's YAML config: its source, image settings, format and splits.")
@click.option("--sample", type=click.IntRange(min=1), default=32, show_default=True,
              help="Originals to read and convert (a seeded random sample, seed = the job's).")
@click.option("--workers", type=click.IntRange(min=0),
              help="Cores to predict for; 0 = all cores of this machine.  [default: the "
              "job's run.workers]")
@click.option("--gpu-demand", type=click.FloatRange(min=0, min_open=True),
              help="Images/s the training GPU consumes: adds its expected utilisation.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead.")
@click.option("--quiet", is_flag=True, help="No progress lines on stderr.")
@_fail_cleanly
def probe(source, config_file, sample, workers, gpu_demand, as_json, quiet) -> None:
    """Measure the storage and this machine on a sample of SOURCE, and predict the pack.

    Listing rate (serial and parallel), cold read throughput at 1, 2, 4, ... readers, the
    image path per format, the single writer; then the pack's images/s, which of the three
    binds, its time and output for the whole tree, the --workers to use, and what a training
    DataLoader gets from the originals against the shards.
    """
    from .probe import ProbeOptions
    from .probe import probe as run_probe
    from .probe.text import probe_json, probe_table

    config = load_config(config_file, {"source.path": source, "run.workers": workers})
    result = run_probe(config, ProbeOptions(sample=sample, gpu_demand=gpu_demand),
                       None if quiet else _say)
    if as_json:
        _echo(json.dumps(probe_json(result), indent=1))
    else:
        _echo(probe_table(result))


@contextlib.contextmanager
def _report_to(path: str | None):
    """Collect a JSON report and write it at the end, whatever the outcome."""
    report: dict[str, Any] = {"command": "pack", "version": __version__}
    try:
        yield report
        report.update(exit_code=0, error=None)
    except ShardsmithError as exc:
        report.update(exit_code=exc.exit_code, error=str(exc))
        raise
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        report.update(exit_code=EXIT_TERMINATED if terminated else EXIT_INTERRUPTED,
                      error="terminated" if terminated else "interrupted")
        raise
    except OSError as exc:
        report.update(exit_code=1, error=storage_error(exc))
        raise
    finally:
        if path is not None:
            try:
                write_json_atomic(check_output_file(path), report)
            except OutputStateError as exc:  # replaced by a link or a FIFO since the start
                _echo(f"shardsmith: warning: cannot write the report: {exc}", err=True)
            except OSError as exc:  # the report is a by-product: never fail a pack over it
                _echo(f"shardsmith: warning: cannot write the report: "
                      f"{storage_error(exc)}", err=True)


@main.command("init-config")
@_fail_cleanly
def init_config() -> None:
    """Print an example job file with every key and its default: edit its paths, then
    `shardsmith pack --config job.yaml`.

    \b
        shardsmith init-config > job.yaml
    """
    _echo(example_file(), nl=False)


@main.command()
@click.argument("dataset", required=False, type=_Dataset(file_okay=False, exists=True))
@click.option("--split", help="Only this split (rejects and excluded files are the dataset's).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document, for scripts.")
@click.option("--rejects", "all_rejects", is_flag=True,
              help="List every reject (default: the first 20).")
@click.option("--excluded", "all_excluded", is_flag=True,
              help="List every recorded excluded path (default: the first 20 of each reason).")
@click.option("--quality", type=click.IntRange(min=0), default=0, metavar="N",
              help="Also measure N seeded samples against an exact resize of their originals "
                   "(PSNR, SSIM per class; reads the originals under --source).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the samples --quality measures, and of the --weights draw (the "
                   "readers' seed=).")
@click.option("--imbalance", type=click.FloatRange(min=1), default=10.0, show_default=True,
              help="Warn when the largest class has more than this many times the samples of "
                   "the smallest.")
@click.option("--weights", metavar="SPEC",
              help="Instead, show the class mix these class weights draw in an epoch of the "
                   "torch and DALI readers (their weights=): SPEC like 'scratch=10,dent=10,*=1' "
                   "(CLASS or #ID = weight; * every other class).")
@click.option("--draws", type=click.IntRange(min=1), metavar="N",
              help="Samples of the --weights epoch (the readers' draws=; default: the "
                   "selection's size).")
@_source_option
@_config_option
@_storage_option
@_fail_cleanly
def inspect(dataset, split, as_json, all_rejects, all_excluded, quality, seed,
            imbalance, weights, draws, named_source, config_file, storage_options) -> None:
    """Show what DATASET holds: samples per class and split, shards, image sizes, rejects,
    excluded files, duplicates (leakage across splits), groups and warnings."""
    import json

    from .insight.inspection import inspect_dataset, inspection_json, inspection_text

    dataset, config = _dataset_at(dataset, config_file, storage_options, named_source)
    if weights is not None or draws is not None:
        from .insight.class_mix import class_mix, class_mix_json, class_mix_text

        if weights is None:
            raise click.UsageError("--draws sets the size of the --weights epoch: give "
                                   "--weights too")
        mix = class_mix(dataset, weights, split=split, seed=seed, draws=draws)
        _echo(json.dumps(class_mix_json(mix), indent=1) if as_json else class_mix_text(mix))
        return
    originals = None  # none named: --quality says how to name them
    if quality and (named_source or config is not None):
        originals = _originals(named_source, config, storage_options)
    inspection = inspect_dataset(dataset, split=split, imbalance=imbalance, quality=quality,
                                 seed=seed, quiet=as_json, originals=originals)
    if as_json:
        _echo(json.dumps(inspection_json(inspection), indent=1))
    else:
        _echo(inspection_text(inspection, all_rejects, all_excluded))


@main.command()
@click.argument("dataset", required=False, type=_Dataset(file_okay=False, exists=True))
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False),
              help="The PNG to write.")
@click.option("--split", help="Only samples of this split.")
@click.option("--per-class", type=click.IntRange(1, 64), default=8, show_default=True,
              help="Samples shown per class.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Which samples: the same seed draws the same sheet.")
@click.option("--thumb", type=click.IntRange(64, 512), default=160, show_default=True,
              help="Thumbnail size in pixels.")
@click.option("--objects", is_flag=True,
              help="Draw each sample's boxes (with class names) and class mask outlines, one "
                   "colour per object class (an annotated dataset).")
@_source_option
@_config_option
@_storage_option
@_fail_cleanly
def sheet(dataset, output, split, per_class, seed, thumb, objects, named_source, config_file,
          storage_options) -> None:
    """Draw a contact sheet of DATASET as one PNG: seeded samples per class, class counts per
    split, and the rejected originals."""
    import time

    from .dataset.manifest import read_manifest
    from .insight.objects_drawn import cut_drawn
    from .insight.sheet import render_sheet

    started = time.monotonic()
    target = check_output_file(output)
    directory, config = _dataset_at(dataset, config_file, storage_options, named_source)
    if isinstance(directory, Path):  # a bucket holds no local file: nothing to collide with
        _refuse_output_inside(target, directory)
    manifest = read_manifest(directory)
    drawn = render_sheet(directory, manifest, per_class, seed, split, thumb, objects,
                         _originals(named_source, config, storage_options, manifest.source))
    drawn.save(check_output_file(output))  # again: what is there may have changed meanwhile
    for note in drawn.notes:
        _echo(f"note: {printable(note)}", err=True)
    _echo(f"{printable(output)}: {drawn.image.width}x{drawn.image.height} px, "
               f"{plural(len(drawn.rows), 'class row')}, "
               f"{plural(sum(len(row.thumbnails) for row in drawn.rows), 'sample')}, "
               f"{plural(len(drawn.rejects), 'reject')}"
               + (f", {plural(len(drawn.objects), 'object')} drawn" if objects else "")
               + cut_drawn(drawn.objects)
               + f" ({time.monotonic() - started:.1f}s)")


@main.command()
@click.argument("dataset", required=False, type=_Dataset(file_okay=False))
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False),
              help="The HTML file to write.")
@_config_option
@click.option("--rejects", "rejects_shown", type=click.IntRange(0, 1000), default=48,
              show_default=True, help="Rejects shown with a thumbnail of their original.")
@click.option("--samples", "samples_shown", type=click.IntRange(0, 1000), default=24,
              show_default=True, help="New samples shown, with their objects drawn.")
@_source_option
@_storage_option
@_fail_cleanly
def report(dataset, output, config_file, rejects_shown, samples_shown, named_source,
           storage_options) -> None:
    """Write a self-contained HTML report of DATASET: versions, what changed, class balance,
    rejects with thumbnails, new samples, timings."""
    import time

    from .dataset.manifest import read_manifest
    from .insight.htmlreport import ReportOptions, render_report

    started = time.monotonic()
    target = None if output == "-" else check_output_file(output)
    stdout = _binary_stdout() if target is None else None  # before the work, not after
    directory, config = _dataset_at(dataset, config_file, storage_options, named_source)
    if isinstance(directory, Path) and target is not None:  # a bucket holds no local file
        _refuse_output_inside(target, directory, "the report")
    manifest = read_manifest(directory)
    page = render_report(directory, manifest, ReportOptions(
        rejects_shown=rejects_shown, samples_shown=samples_shown,
        originals=_originals(named_source, config, storage_options, manifest.source)))
    if stdout is not None:  # ``-o -``: the page on stdout, the summary on stderr
        stdout.write(page.html.encode())
        stdout.flush()  # a closed pipe fails here, as one line, not at exit
    else:
        page.save(Path(output))
    for note in page.notes:
        _echo(f"note: {printable(note)}", err=True)
    _echo(f"{'stdout' if target is None else printable(output)}: "
          f"{human_bytes(len(page.html.encode()))}, "
          f"{plural(page.rejects_shown, 'reject')} ({page.reject_pictures:,} pictured), "
          f"{plural(page.samples_shown, 'sample')}"
          + (f"; no diff: {printable(page.diff_note)}" if page.diff_note else "")
          + f" ({time.monotonic() - started:.1f}s)", err=target is None)


def _binary_stdout() -> Any:
    """The byte stream of stdout; an OSError (one line, exit 1) when the process has none
    (started with stdout closed, ``>&-``: click raises a bare RuntimeError)."""
    try:
        return click.get_binary_stream("stdout")
    except RuntimeError:
        raise OSError(errno.EBADF, "stdout is closed: nowhere to write the report (-o -)") \
            from None


def _refuse_output_inside(output: Path, dataset: Path, what: str = "the sheet") -> None:
    """A sheet (or report) written into the dataset it draws would replace one of its files
    (even the manifest) or leave a stranger among them: refused, whatever link or ``..`` leads
    there."""
    target = output.parent.resolve() / output.name
    root = dataset.resolve()
    if target == root or root in target.parents or target.resolve() == root \
            or root in target.resolve().parents:
        raise OutputStateError(f"{output}: inside the dataset {dataset}; write {what} "
                               "outside it")


@main.command()
@click.argument("dataset", required=False, type=_Dataset(file_okay=False, exists=True))
@_config_option
@_storage_option
@_fail_cleanly
def log(dataset, config_file, storage_options) -> None:
    """List the versions of the dataset in DATASET, oldest first."""
    from .dataset.manifest import read_manifest

    place, _ = _dataset_at(dataset, config_file, storage_options)
    _echo(version_log(read_manifest(place), place if isinstance(place, Path) else None))


@main.command()
@click.argument("dataset", required=False, type=_Dataset(file_okay=False))
@click.argument("versions", nargs=-1, metavar="[vA [vB]]")
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON.")
@click.option("--examples", type=click.IntRange(0, 1_000_000), default=50, show_default=True,
              help="Paths listed per kind of change (--json; the summary shows 10).")
@_config_option
@_storage_option
@_fail_cleanly
def diff(dataset, versions, as_json, examples, config_file, storage_options) -> None:
    """What changed between two versions of DATASET (default: the last two).

    By source path: samples added, removed, changed and relabelled; classes and object
    classes added; samples per split and class and objects per class, before and after;
    rejects new and fixed.

    No version: the last two.  One (v3): that one against the current.  Two (v2 v5): the
    changes of v3 to v5 composed.
    """
    from .insight.diff import diff_versions

    if config_file is not None and dataset is not None and _is_version(dataset):
        dataset, versions = None, (dataset, *versions)  # ``diff --config job.yaml v2 v5``
    numbers = [_version_number(text) for text in versions]
    if len(numbers) > 2:
        raise ConfigError(f"diff: at most two versions, got {len(numbers)}")
    result = diff_versions(_dataset_at(dataset, config_file, storage_options)[0], *numbers,
                           examples=examples)
    if as_json:
        _echo(json.dumps(result.to_json(), indent=1))
    else:
        _echo(result.summary())


def _version_number(text: str) -> int:
    """``v3`` or ``3`` -> 3; ConfigError (exit 2) for anything else."""
    if not _is_version(text):
        raise ConfigError(f"diff: {printable(text)!r} is not a version (v3, or 3)")
    return int(text[1:] if text[:1] in ("v", "V") else text)


def _is_version(text: str) -> bool:
    digits = text[1:] if text[:1] in ("v", "V") else text
    return digits.isdigit() and digits.isascii() and len(digits) <= 9


@main.command()
@click.argument("dataset", required=False, type=click.Path(file_okay=False))
@click.option("--to", "destination", type=click.Path(file_okay=False),
              help="Local destination directory (or stage.to in the config).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="The pack config: its output.path is the dataset, stage.to the destination, "
              "its storage: section reaches an s3:// one (--storage over it).")
@click.option("--split", help="Stage only this split.")
@click.option("--prune", is_flag=True, help="Remove staged shards the manifest no longer lists.")
@click.option("--workers", type=int, default=4, show_default=True,
              help="Parallel copies.")
@click.option("--rehash", is_flag=True,
              help="Re-read already staged files instead of trusting size and mtime.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@_storage_option
@_fail_cleanly
def stage(dataset, destination, config_file, split, prune, workers, rehash, quiet,
          storage_options) -> None:
    """Copy the packed DATASET (a directory with manifest.json, or s3://bucket/prefix) to
    local disk, verified.

    Only new or changed shards are copied; the manifest is written last.
    """
    from .ops.stage import stage as run_stage

    dataset, config = _dataset_at(dataset, config_file, storage_options)
    destination = destination or (config.stage.to if config is not None else None)
    if not destination:
        raise ConfigError("stage.to: no destination given (--to or config)")
    result = run_stage(dataset, destination, split=split, prune=prune, workers=workers,
                       quiet=quiet, rehash=rehash)
    _echo(stage_summary(result))


@main.command()
@click.argument("dataset", required=False, type=click.Path(file_okay=False))
@_config_option
@click.option("--decode", is_flag=True, help="Also decode every image and check its size.")
@click.option("--workers", type=int, default=4, show_default=True, help="Shards checked at once.")
@click.option("--quiet", is_flag=True, help="Print only problems.")
@_storage_option
@_fail_cleanly
def verify(dataset, config_file, decode, workers, quiet, storage_options) -> None:
    """Check that DATASET holds exactly what its manifest lists; exit 0 only if all holds.

    An s3://bucket/prefix DATASET is checked for sizes and sha256 (its records are parsed
    once staged)."""
    from .ops.verify import verify as run_verify

    report = run_verify(_dataset_at(dataset, config_file, storage_options)[0], decode=decode,
                        workers=workers)
    for problem in report.problems:
        _echo(problem)
    if not quiet:
        for note in report.notes:
            _echo(f"note: {note}")
    if not quiet or not report.ok:
        _echo(verify_summary(report), err=not report.ok)
    if not report.ok:
        sys.exit(1)


@main.command()
@click.argument("dataset", required=False, metavar="[DATASET]", type=_Dataset(file_okay=False))
@click.argument("destination", required=False, metavar="DESTINATION", type=click.Path())
@click.option("--layout", required=True, type=click.Choice(["yolo", "coco", "anomalib"]),
              help="The trainer's folder layout (docs/export.md).")
@click.option("--task", type=click.Choice(["auto", "detect", "segment", "classify"]),
              default="auto", show_default=True,
              help="yolo: auto = classify without objects, segment when every object has a "
              "polygon or mask, else detect.")
@click.option("--boxes-as-polygons", is_flag=True,
              help="An object with a box only gets its box as a polygon (yolo segment, COCO "
              "segmentation); default: yolo segment refuses, COCO leaves it out.")
@click.option("--normal", default="good", show_default=True,
              help="anomalib: the image class of normal samples.")
@click.option("--anomalib-layout", type=click.Choice(["folder", "mvtec"]), default="folder",
              show_default=True, help="anomalib: its Folder layout or the MVTec one.")
@click.option("--split", "splits", multiple=True,
              help="Export only this split (repeatable; default every split).")
@click.option("--keep-cut", is_flag=True,
              help="yolo, coco: export the samples showing a defect cut below min_visible, "
              "the cut objects labelled (default: left out, and counted).")
@click.option("--keep", type=click.IntRange(1, 1000), default=2, show_default=True,
              help="Versions kept: the current one and the ones before it (a training run "
              "started on one keeps its files).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@_config_option
@_storage_option
@_fail_cleanly
def export(dataset, destination, layout, task, boxes_as_polygons, normal, anomalib_layout,
           splits, keep_cut, keep, quiet, config_file, storage_options) -> None:
    """Write the packed DATASET into DESTINATION as a trainer's folder layout: DEST/vN for
    the dataset's version N, DEST/current a link to it, switched when it is complete.

    Files unchanged since the last export are hard-linked from it; an interrupted export
    resumes.  With --config and one path, that path is DESTINATION and the job file's
    output.path the dataset.
    """
    from .ops.export import export as run_export
    from .ops.export import export_summary

    if destination is None:
        if config_file is None or dataset is None:
            raise click.UsageError("DESTINATION: a required argument, not given")
        dataset, destination = None, dataset
    result = run_export(_dataset_at(dataset, config_file, storage_options)[0], destination,
                        layout, task=task, normal=normal, anomalib_layout=anomalib_layout,
                        splits=tuple(splits) or None, quiet=quiet, keep=keep,
                        keep_cut=keep_cut, boxes_as_polygons=boxes_as_polygons)
    _echo(export_summary(result))


@main.command("bench-read")
@click.argument("shards", type=click.Path(file_okay=False, exists=True))
@click.option("--source", type=click.Path(file_okay=False, exists=True),
              help="The original tree the shards were packed from: adds a loader over the "
              "originals.")
@click.option("--cold", is_flag=True,
              help="Drop each original from the page cache before reading it (what a loader "
              "on a NAS gets).")
@click.option("--tfrecords", type=click.Path(file_okay=False, exists=True),
              help="A TFRecord dataset of the same images: adds the tf.data reader.")
@click.option("--split", help="Read only this split.")
@click.option("--workers", type=int, help="DataLoader workers and processes for the originals "
              "(default: all cores).")
@click.option("--batch-size", type=int, default=64, show_default=True)
@click.option("--seconds", type=float, default=10.0, show_default=True,
              help="Time per row.")
@click.option("--json", "json_file", type=click.Path(dir_okay=False),
              help="Also write the results as JSON.")
@_fail_cleanly
def bench_read(shards, source, cold, tfrecords, split, workers, batch_size, seconds,
               json_file) -> None:
    """Samples/s of the readers over SHARDS against the decode floor (and the originals)."""
    from .readers.bench import as_json, report
    from .readers.bench import bench_read as run

    results = run(shards, source=source, tfrecords=tfrecords, workers=workers,
                  seconds=seconds, split=split, batch_size=batch_size, cold=cold)
    _echo(report(results))
    if json_file:
        Path(json_file).write_text(as_json(results) + "\n")


if __name__ == "__main__":  # pragma: no cover
    main()
