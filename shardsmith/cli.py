"""Command line: options → Config → API call → summary.  No logic lives here.

Exit codes: 0 success · 1 failure · 2 bad configuration, usage, manifest or output state ·
3 too many rejects · 130 interrupted (Ctrl-C) · 143 terminated (SIGTERM); after either,
rerun pack, stage or export to resume.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from .atomic import check_output_file, write_bytes_atomic, write_json_atomic
from .config import Config, load_config
from .config.commands import (
    BenchReadCommand,
    Declared,
    DiffCommand,
    ExportCommand,
    InitConfigCommand,
    InspectCommand,
    LogCommand,
    PackCommand,
    ProbeCommand,
    ReportCommand,
    SheetCommand,
    StageCommand,
    VerifyCommand,
    parameters,
)
from .config.declare import Parameter
from .config.settings import example_file, flags, overrides_of
from .errors import ConfigError, OutputStateError, ShardsmithError, Terminated, TooManyRejectsError
from .ops.summary import (
    pack_summary,
    reject_budget_exceeded,
    reject_lines,
    run_record,
    version_log,
)
from .storage import Location, SecretFilter, is_url
from .text import printable

if TYPE_CHECKING:
    from .insight.named_source import Originals

EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
RESUMING = ("pack", "stage", "export")  # the commands whose finished work a rerun keeps


def _fail_cleanly(command: Callable, resumes: bool = False) -> Callable:
    """Turn our exceptions into one clear line on stderr and the documented exit code."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            interrupts.release()  # held since the start: one that came meanwhile is raised here
            return command(*args, **kwargs)
        except (ShardsmithError, KeyboardInterrupt, OSError, MemoryError) as exc:
            code, line = _ending(exc, resumes)
            _fail(line, code)

    return wrapper


def _ending(exc: BaseException, resumes: bool = False) -> tuple[int, str]:
    """The exit code and the one line of what ended a command: our errors, Ctrl-C or SIGTERM
    (for a command that ``resumes``, finished work kept), the file system (full, read-only,
    permissions, gone), memory."""
    if isinstance(exc, ShardsmithError):
        return exc.exit_code, str(exc)
    resume = "; finished work is kept, rerun the same command to resume" if resumes else ""
    if isinstance(exc, Terminated):
        return EXIT_TERMINATED, f"terminated (SIGTERM){resume}"
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED, f"interrupted{resume}"
    if isinstance(exc, OSError):
        return 1, storage_error(exc)
    # a 43-line traceback before, for --draws under a memory limit
    return 1, "out of memory: ask for less (e.g. fewer --draws) or allow this process more memory"


class _Dataset(click.Path):
    """A dataset directory, or an ``s3://`` URL (checked by ``storage.locate``, not here)."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if is_url(value):
            return value
        return super().convert(value, param, ctx)


def _options(pairs: tuple[str, ...]) -> dict[str, str] | None:
    from .storage import parse_options

    return parse_options(pairs) or None


def _dataset_at(command: Any) -> tuple[Location, Config | None]:
    """Where a command's DATASET is, and the job file when one was given: the argument, else
    the job file's ``output.path``; an ``s3://`` dataset is reached as ``pack`` reaches it,
    through the job file's ``storage:`` section with ``--storage`` over it.  ``--storage``
    with a local dataset is refused, unless it serves an ``s3://`` ``--source``
    (``named_source``); the section is then left unused (it may be the source's)."""
    from .storage import location

    dataset, named_source = command.dataset, getattr(command, "named_source", None)
    options = _options(command.storage_options)
    config = None
    if command.config_file is not None:
        config = load_config(command.config_file, _storage_settings(command.storage_options))
        dataset = dataset or config.output.path
        if is_url(dataset):
            options = config.storage.options() or None
    if not dataset:
        raise ConfigError("output.path: no dataset given (argument DATASET or --config)")
    if not is_url(dataset) and is_url(named_source or ""):
        options = None  # the --storage options are the source's: a folder needs none
    return location(dataset, options), config


def _originals(command: Any, config: Config | None, recorded: str = "") -> Originals:
    """Where originals may be read: under ``--source``, else under the job file's
    ``source.path`` (through its ``storage:`` section, ``--storage`` over it), never under
    the source the dataset ``recorded`` (only quoted in the note when nothing is named)."""
    from .insight.named_source import named_originals

    named_source, storage = command.named_source, _options(command.storage_options)
    if not named_source and config is not None:  # the job file names the source packed from
        named_source, storage = config.source.path, config.storage.options()  # --storage in it
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
        for flag in reversed(flags(root)):  # None when not given: the job file's value holds
            command = _click_parameter(Declared(flag.parameter, flag.kind, False, None, Parameter(
                (flag.flag,), flag.help, flag.metavar, choices=flag.choices)))(command)
        return command

    return decorate


def declared_command(declaration: type, group: click.Group | None = None
                     ) -> Callable[[Callable], click.Command]:
    """A command of ``group`` (``main``) made from its declaration (``config.commands``): a
    click parameter per field, in their order, and the command called with one instance."""

    def decorate(run: Callable) -> click.Command:
        @functools.wraps(run)
        def call(**values: Any) -> Any:
            names = {item.name for item in dataclasses.fields(declaration)}
            if "settings" in names:  # pack's setting flags, as dotted-key overrides
                values["settings"] = overrides_of(
                    {name: values.pop(name) for name in list(values) if name not in names})
            declared = {entry.name: entry for entry in parameters(declaration)}
            for entry in declared.values():
                needed = entry.parameter.needs and declared[entry.parameter.needs]
                if needed and values[entry.name] != entry.default \
                        and values[needed.name] == needed.default:
                    raise click.UsageError(entry.parameter.needs_why or (
                        f"{entry.parameter.flags[-1]} goes with {needed.parameter.flags[-1]}"))
            return run(declaration(**values))

        command = _fail_cleanly(call, run.__name__ in RESUMING)
        for entry in reversed(list(parameters(declaration))):  # click lists them in this order
            command = _click_parameter(entry)(command)
        return (group or main).command()(command)

    return decorate


def _click_parameter(entry: Declared) -> Callable[[Callable], Callable]:
    """The click argument or option a field declares."""
    if entry.name == "settings":
        return setting_options()
    declared, kind = entry.parameter, entry.kind
    if declared.path:
        okay = {"file_okay": declared.path in ("file", "any"),
                "dir_okay": declared.path != "file"}
        kind = (_Dataset if declared.path == "dataset" else click.Path)(exists=declared.exists,
                                                                        **okay)
    elif declared.choices:
        kind = click.Choice(declared.choices)
    elif declared.bounds:
        kind = (click.IntRange if kind is int else click.FloatRange)(*declared.bounds,
                                                                      min_open=declared.above)
    metavar = declared.metavar or None
    if not declared.flags:
        return click.argument(entry.name, type=kind, required=declared.required,
                              nargs=-1 if entry.many else 1, metavar=metavar)
    if kind is bool:
        return click.option(*declared.flags, entry.name, is_flag=True, default=entry.default,
                            help=declared.help)
    default = {} if entry.default is None else {"default": entry.default}  # None: click's
    return click.option(*declared.flags, entry.name, type=kind, multiple=entry.many,
                        required=declared.required, metavar=metavar, **default,
                        show_default=declared.show_default, help=declared.help or None)


@declared_command(PackCommand)
def pack(command: PackCommand) -> None:
    """Pack the images under SOURCE into shards and a manifest in OUTPUT.

    SOURCE and OUTPUT are folders or store URLs (s3://bucket/prefix), or come from the
    config file (source.path, output.path).  Rerunning a finished pack with the same
    settings does nothing; rerunning an interrupted one resumes it.
    """
    from .insight.inspection import pack_findings
    from .packing.pipeline import pack as run_pack

    if command.report_file is not None:  # a link or a FIFO is refused before any work
        check_output_file(command.report_file, folder=False)  # a missing folder: warned at end
    with _report_to(command.report_file) as report:
        config = load_config(command.config_file,
                             {"source.path": command.source, "output.path": command.output}
                             | command.settings | _storage_settings(command.storage_options))
        if command.dry_run:
            _dry_run(config, command.with_probe, report)
            return
        result = run_pack(config)
        report.update(run_record(result))
        _echo(pack_summary(result))
        if not result.up_to_date:  # an unchanged dataset was summed up when it was packed
            findings = pack_findings(result.output, result.manifest)
            report.update(findings.report)
            for line in findings.lines:
                _echo(line)
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


@declared_command(ProbeCommand)
def probe(command: ProbeCommand) -> None:
    """Measure the storage and this machine on a sample of SOURCE, and predict the pack.

    Listing rate (serial and parallel), cold read throughput at 1, 2, 4, ... readers, the
    image path per format, the single writer; then the pack's images/s, which of the three
    binds, its time and output for the whole tree, the --workers to use, and what a training
    DataLoader gets from the originals against the shards.
    """
    from .probe import ProbeOptions
    from .probe import probe as run_probe
    from .probe.text import probe_json, probe_table

    config = load_config(command.config_file,
                         {"source.path": command.source, "run.workers": command.workers})
    measured = ProbeOptions(sample=command.sample, gpu_demand=command.gpu_demand)
    result = run_probe(config, measured, None if command.quiet else _say)
    _echo(json.dumps(probe_json(result), indent=1) if command.as_json else probe_table(result))


@contextlib.contextmanager
def _report_to(path: str | None):
    """Collect a JSON report and write it at the end, whatever the outcome."""
    report: dict[str, Any] = {"command": "pack", "version": __version__}
    try:
        yield report
        report.update(exit_code=0, error=None)
    except (ShardsmithError, KeyboardInterrupt, OSError) as exc:
        code, line = _ending(exc)
        report.update(exit_code=code, error={EXIT_INTERRUPTED: "interrupted",
                                             EXIT_TERMINATED: "terminated"}.get(code, line))
        raise
    finally:
        if path is not None:
            try:
                write_json_atomic(check_output_file(path), report)
            # replaced by a link or a FIFO since the start, or the file system: the report is a
            # by-product, never fail a pack over it
            except (OutputStateError, OSError) as exc:
                _echo(f"shardsmith: warning: cannot write the report: {_ending(exc)[1]}",
                      err=True)


@declared_command(InitConfigCommand)
def init_config(command: InitConfigCommand) -> None:
    """Print an example job file with every key and its default: edit its paths, then
    `shardsmith pack --config job.yaml`.

    \b
        shardsmith init-config > job.yaml
    """
    _echo(example_file(), nl=False)


@declared_command(InspectCommand)
def inspect(command: InspectCommand) -> None:
    """Show what DATASET holds: samples per class and split, shards, image sizes, rejects,
    excluded files, duplicates (leakage across splits), groups and warnings; or, with
    --near-duplicates, the originals shot more than once."""
    from .insight.inspection import inspect_dataset, inspection_json, inspection_text

    dataset, config = _dataset_at(command)
    if command.near_duplicates:
        from .insight.near_duplicates import find, near_duplicates_json, near_duplicates_text

        found = find(dataset, distance=command.distance, quiet=command.as_json,
                     workers=command.workers, split=command.split)
        _echo(json.dumps(near_duplicates_json(found), indent=1) if command.as_json
              else near_duplicates_text(found))
        return
    if command.weights is not None:
        from .insight.class_mix import class_mix, class_mix_json, class_mix_text

        mix = class_mix(dataset, command.weights, split=command.split, seed=command.seed,
                        draws=command.draws)
        _echo(json.dumps(class_mix_json(mix), indent=1) if command.as_json
              else class_mix_text(mix))
        return
    originals = None  # none named: --quality says how to name them
    if command.quality and (command.named_source or config is not None):
        originals = _originals(command, config)
    inspection = inspect_dataset(dataset, split=command.split, imbalance=command.imbalance,
                                 quality=command.quality, seed=command.seed,
                                 quiet=command.as_json, originals=originals)
    if command.as_json:
        _echo(json.dumps(inspection_json(inspection), indent=1))
    else:
        _echo(inspection_text(inspection, command.all_rejects, command.all_excluded))


@declared_command(SheetCommand)
def sheet(command: SheetCommand) -> None:
    """Draw a contact sheet of DATASET as one PNG: seeded samples per class, class counts per
    split, and the rejected originals; or, with --near-duplicates, its near-duplicates."""
    import time

    from .dataset.manifest import read_manifest
    from .insight.sheet import render_sheet

    started, output = time.monotonic(), command.output
    if command.near_duplicates:
        defaults = {field.name: field.default for field in dataclasses.fields(command)}
        given = ", ".join(flag for flag, name in (("--per-class", "per_class"),
                                                   ("--seed", "seed"), ("--objects", "objects"))
                          if getattr(command, name) != defaults[name])
        if given:
            raise click.UsageError(f"{given}: the sheet of --near-duplicates draws every "
                                   "cluster, with no draw or objects to choose")
    target = check_output_file(output)
    directory, config = _dataset_at(command)
    _refuse_output_inside(target, directory)
    manifest = read_manifest(directory)
    if command.near_duplicates:
        from .insight.near_duplicates import find
        from .insight.near_sheet import near_sheet_png

        found = find(directory, quiet=False, split=command.split)
        write_bytes_atomic(check_output_file(output),
                           near_sheet_png(found, directory, manifest, command.thumb))
        _echo(f"wrote {printable(output)}: {len(found.clusters):,} near-duplicate clusters, "
              f"{found.candidates:,} pairs checked ({time.monotonic() - started:.1f}s)")
        return
    drawn = render_sheet(directory, manifest, command.per_class, command.seed, command.split,
                         command.thumb, command.objects,
                         _originals(command, config, manifest.source))
    drawn.save(check_output_file(output))  # again: what is there may have changed meanwhile
    for note in drawn.notes:
        _echo(f"note: {printable(note)}", err=True)
    _echo(drawn.summary(output, command.objects) + f" ({time.monotonic() - started:.1f}s)")


@declared_command(ReportCommand)
def report(command: ReportCommand) -> None:
    """Write a self-contained HTML report of DATASET: versions, what changed, class balance,
    rejects with thumbnails, new samples, timings."""
    import time

    from .dataset.manifest import read_manifest
    from .insight.htmlreport import ReportOptions, render_report

    started, output = time.monotonic(), command.output
    target = None if output == "-" else check_output_file(output)
    stdout = _binary_stdout() if target is None else None  # before the work, not after
    directory, config = _dataset_at(command)
    if target is not None:
        _refuse_output_inside(target, directory, "the report")
    manifest = read_manifest(directory)
    page = render_report(directory, manifest, ReportOptions(
        rejects_shown=command.rejects_shown, samples_shown=command.samples_shown,
        originals=_originals(command, config, manifest.source)))
    if stdout is not None:  # ``-o -``: the page on stdout, the summary on stderr
        stdout.write(page.html.encode())
        stdout.flush()  # a closed pipe fails here, as one line, not at exit
    else:
        page.save(Path(output))
    for note in page.notes:
        _echo(f"note: {printable(note)}", err=True)
    _echo(page.summary("stdout" if target is None else output)
          + f" ({time.monotonic() - started:.1f}s)", err=target is None)


def _binary_stdout() -> Any:
    """The byte stream of stdout; an OSError (one line, exit 1) when the process has none
    (started with stdout closed, ``>&-``: click raises a bare RuntimeError)."""
    try:
        return click.get_binary_stream("stdout")
    except RuntimeError:
        raise OSError(errno.EBADF, "stdout is closed: nowhere to write the report (-o -)") \
            from None


def _refuse_output_inside(output: Path, dataset: Location, what: str = "the sheet") -> None:
    """A sheet (or report) written into the dataset it draws would replace one of its files
    (even the manifest) or leave a stranger among them: refused, whatever link or ``..`` leads
    there (a dataset in a store holds no local file: nothing to collide with)."""
    if is_url(dataset):
        return
    target = output.parent.resolve() / output.name
    root = dataset.resolve()
    if target == root or root in target.parents or target.resolve() == root \
            or root in target.resolve().parents:
        raise OutputStateError(f"{output}: inside the dataset {dataset}; write {what} "
                               "outside it")


@declared_command(LogCommand)
def log(command: LogCommand) -> None:
    """List the versions of the dataset in DATASET, oldest first."""
    from .dataset.manifest import read_manifest

    place, _ = _dataset_at(command)
    _echo(version_log(read_manifest(place), place))


@declared_command(DiffCommand)
def diff(command: DiffCommand) -> None:
    """What changed between two versions of DATASET (default: the last two).

    By source path: samples added, removed, changed and relabelled; classes and object
    classes added; samples per split and class and objects per class, before and after;
    rejects new and fixed.

    No version: the last two.  One (v3): that one against the current.  Two (v2 v5): the
    changes of v3 to v5 composed.
    """
    from .insight.diff import diff_versions

    if command.config_file is not None and command.dataset is not None \
            and _is_version(command.dataset):  # ``diff --config job.yaml v2 v5``
        command = dataclasses.replace(command, dataset=None,
                                      versions=(command.dataset, *command.versions))
    numbers = [_version_number(text) for text in command.versions]
    if len(numbers) > 2:
        raise ConfigError(f"diff: at most two versions, got {len(numbers)}")
    result = diff_versions(_dataset_at(command)[0], *numbers, examples=command.examples)
    _echo(json.dumps(result.to_json(), indent=1) if command.as_json else result.summary())


def _version_number(text: str) -> int:
    """``v3`` or ``3`` -> 3; ConfigError (exit 2) for anything else."""
    if not _is_version(text):
        raise ConfigError(f"diff: {printable(text)!r} is not a version (v3, or 3)")
    return int(text[1:] if text[:1] in ("v", "V") else text)


def _is_version(text: str) -> bool:
    digits = text[1:] if text[:1] in ("v", "V") else text
    return digits.isdigit() and digits.isascii() and len(digits) <= 9


@declared_command(StageCommand)
def stage(command: StageCommand) -> None:
    """Copy the packed DATASET (a directory with manifest.json, or s3://bucket/prefix) to
    local disk, verified.

    Only new or changed shards are copied; the manifest is written last.
    """
    from .ops.stage import stage as run_stage

    dataset, config = _dataset_at(command)
    destination = command.destination or (config.stage.to if config is not None else None)
    if not destination:
        raise ConfigError("stage.to: no destination given (--to or config)")
    result = run_stage(dataset, destination, split=command.split, prune=command.prune,
                       workers=command.workers, quiet=command.quiet, rehash=command.rehash)
    _echo(result.summary())


@declared_command(VerifyCommand)
def verify(command: VerifyCommand) -> None:
    """Check that DATASET holds exactly what its manifest lists; exit 0 only if all holds.

    An s3://bucket/prefix DATASET is checked for sizes and sha256 (its records are parsed
    once staged)."""
    from .ops.verify import verify as run_verify

    report = run_verify(_dataset_at(command)[0], decode=command.decode,
                        workers=command.workers)
    for problem in report.problems:
        _echo(problem)
    if not command.quiet:
        for note in report.notes:
            _echo(f"note: {note}")
    if not command.quiet or not report.ok:
        _echo(report.summary(), err=not report.ok)
    if not report.ok:
        sys.exit(1)


@declared_command(ExportCommand)
def export(command: ExportCommand) -> None:
    """Write the packed DATASET into DESTINATION as a trainer's folder layout: DEST/vN for
    the dataset's version N, DEST/current a link to it, switched when it is complete.

    Files unchanged since the last export are hard-linked from it; an interrupted export
    resumes.  With --config and one path, that path is DESTINATION and the job file's
    output.path the dataset.
    """
    from .ops.export import export as run_export

    if command.destination is None:
        if command.config_file is None or command.dataset is None:
            raise click.UsageError("DESTINATION: a required argument, not given")
        command = dataclasses.replace(command, dataset=None, destination=command.dataset)
    result = run_export(_dataset_at(command)[0], command.destination, command.layout,
                        task=command.task, normal=command.normal,
                        anomalib_layout=command.anomalib_layout,
                        splits=command.splits or None, quiet=command.quiet, keep=command.keep,
                        keep_cut=command.keep_cut, boxes_as_polygons=command.boxes_as_polygons)
    _echo(result.summary())


@declared_command(BenchReadCommand)
def bench_read(command: BenchReadCommand) -> None:
    """Samples/s of the readers over SHARDS against the decode floor (and the originals)."""
    from .readers.bench import as_json, report
    from .readers.bench import bench_read as run

    json_file = None if command.json_file is None else check_output_file(command.json_file)
    results = run(command.shards, source=command.source, tfrecords=command.tfrecords,
                  workers=command.workers, seconds=command.seconds, split=command.split,
                  batch_size=command.batch_size, cold=command.cold)
    _echo(report(results))
    if json_file is not None:  # checked again: what is there may have changed meanwhile
        write_bytes_atomic(check_output_file(json_file), (as_json(results) + "\n").encode())


if __name__ == "__main__":  # pragma: no cover
    main()
