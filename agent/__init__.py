"""The sqale-mcp agent: SQLite tools, the episode loop, model backends and the evaluation.

Its public surface, for the MCP server and any other front end, is the names below, imported from
`agent` itself (`from agent import Database, run_episode`); the modules behind them are the
agent's own and may move, and only `_PUBLIC` says where each name lives. Two more modules are
public, each for one reader: `agent.telemetry.names` (the names of spans, attributes and metrics,
which the server's own spans use too) and `agent.commands.cli` (the `sqale-agent` console script).
tests/project/test_public_surface.py fails when the server imports anything else of the agent.

Importing this package imports nothing else: every process of the product imports it (the SQLite
worker processes and `--version` too), so a name's module is imported the first time the name is
asked for (PEP 562 `__getattr__`). The same imports are written under TYPE_CHECKING, for type
checkers and the static import graph; the test above checks that the two lists agree.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing: this package imports nothing

# Each public name, by the module that holds it (relative to this package).
_PUBLIC = {
    ".errors": "SqaleError ConfigError PromptConfigError DatabasePathError DatabaseBusyError "
    "DatabaseWorkerError BackendError BackendUnreachable BackendTimeout BackendAuthError "
    "ModelNotFound",
    ".version": "add_version_flag package_version print_version_if_alone",
    ".text": "ECHO_CHARS display_name escape_unsafe nearest plain_label plural quoted_text sentence",
    ".untrusted": "SqlAuthor fence_untrusted neutralise_markers sql_block sql_fence",
    ".jsonl": "dumps_line",
    ".episode": "EpisodeResult EpisodeSettings EpisodeStatus RESULT_CELL_CHARS Round StopReason",
    ".episode_text": "BUSY_ADVICE JsonCell clip cut_note json_cell last_reply_excerpt progress_message",
    ".loop": "run_episode",
    ".prompt": "PromptSet",
    ".prompt_files": "load_prompts",
    ".sampling": "Candidate Question SampleBackends SampleRun SampleSettings SampledAnswer VoteSummary "
    "sample_question summary_text",
    ".voting": "CompareLimits Tally",
    ".choices": "AskMode Choice ChoiceOption NONE_OF_THESE choice_of should_ask sources_of",
    ".sql_answer": "answer_from_sql",
    ".sql_differences": "differing_excerpt",
    ".notes": "FACT_SEPARATOR Notes read_notes",
    ".demo": "DEMO_ALIAS default_cache_dir ensure_demo_database",
    ".engine_start": "EngineSession engine_session",
    ".engine_cache": "CacheWatch next_reuse",
    ".backends.base": "Completion EngineFacts ModelBackend",
    ".backends.wrapper": "BackendWrapper",
    ".backends.runtime_slots": "OnWait RuntimeSlots engine_slots waiting_message",
    ".backends.advice": "cache_advice",
    ".backends.registry": "BACKEND_FLAGS BackendSettings make_backend",
    ".sqlite": "ClippedText Database HideReport HideRules WorkerLimits WorkerPool hiding_findings "
    "validate_database_path",
    ".sqlite.hiding": "parse_hide_rule",
    ".verified": "BoundParam Consulted Provenance VerifiedLibrary consult params_text provenance_text "
    "similar_text verified_tier",
    ".verified.proposals": "sql_digest",
    ".verified.saving": "Saved propose_entry",
    ".telemetry.gate": "question_span question_trace tracing_on",
    ".telemetry.setup": "start_telemetry",
    # The settings layer: what the server's own settings are declared and read with.
    ".agent_settings": "AgentSettings MAX_SAMPLES PROMPT_FLAGS",
    ".options": "Option add_flags env_variables file_keys help_text is_secret option_of setting_name "
    "with_default",
    ".settings": "ALIAS_PATTERN check_alias default_config_path layered problem_text read_config_file "
    "read_secret shown_path table_settings with_secrets",
    ".commands.argparse_shim": "SuggestingParser option_groups subcommands",
}
_HOMES = {name: module for module, names in _PUBLIC.items() for name in names.split()}

if TYPE_CHECKING:
    from .agent_settings import MAX_SAMPLES, PROMPT_FLAGS, AgentSettings
    from .backends.advice import cache_advice
    from .backends.base import Completion, EngineFacts, ModelBackend
    from .backends.registry import BACKEND_FLAGS, BackendSettings, make_backend
    from .backends.runtime_slots import OnWait, RuntimeSlots, engine_slots, waiting_message
    from .backends.wrapper import BackendWrapper
    from .choices import NONE_OF_THESE, AskMode, Choice, ChoiceOption, choice_of, should_ask, sources_of
    from .commands.argparse_shim import SuggestingParser, option_groups, subcommands
    from .demo import DEMO_ALIAS, default_cache_dir, ensure_demo_database
    from .engine_cache import CacheWatch, next_reuse
    from .engine_start import EngineSession, engine_session
    from .episode import RESULT_CELL_CHARS, EpisodeResult, EpisodeSettings, EpisodeStatus, Round, StopReason
    from .episode_text import (
        BUSY_ADVICE,
        JsonCell,
        clip,
        cut_note,
        json_cell,
        last_reply_excerpt,
        progress_message,
    )
    from .errors import (
        BackendAuthError,
        BackendError,
        BackendTimeout,
        BackendUnreachable,
        ConfigError,
        DatabaseBusyError,
        DatabasePathError,
        DatabaseWorkerError,
        ModelNotFound,
        PromptConfigError,
        SqaleError,
    )
    from .jsonl import dumps_line
    from .loop import run_episode
    from .notes import FACT_SEPARATOR, Notes, read_notes
    from .options import (
        Option,
        add_flags,
        env_variables,
        file_keys,
        help_text,
        is_secret,
        option_of,
        setting_name,
        with_default,
    )
    from .prompt import PromptSet
    from .prompt_files import load_prompts
    from .sampling import (
        Candidate,
        Question,
        SampleBackends,
        SampledAnswer,
        SampleRun,
        SampleSettings,
        VoteSummary,
        sample_question,
        summary_text,
    )
    from .settings import (
        ALIAS_PATTERN,
        check_alias,
        default_config_path,
        layered,
        problem_text,
        read_config_file,
        read_secret,
        shown_path,
        table_settings,
        with_secrets,
    )
    from .sql_answer import answer_from_sql
    from .sql_differences import differing_excerpt
    from .sqlite import (
        ClippedText,
        Database,
        HideReport,
        HideRules,
        WorkerLimits,
        WorkerPool,
        hiding_findings,
        validate_database_path,
    )
    from .sqlite.hiding import parse_hide_rule
    from .telemetry.gate import question_span, question_trace, tracing_on
    from .telemetry.setup import start_telemetry
    from .text import (
        ECHO_CHARS,
        display_name,
        escape_unsafe,
        nearest,
        plain_label,
        plural,
        quoted_text,
        sentence,
    )
    from .untrusted import (
        SqlAuthor,
        fence_untrusted,
        neutralise_markers,
        sql_block,
        sql_fence,
    )
    from .verified import (
        BoundParam,
        Consulted,
        Provenance,
        VerifiedLibrary,
        consult,
        params_text,
        provenance_text,
        similar_text,
        verified_tier,
    )
    from .verified.proposals import sql_digest
    from .verified.saving import Saved, propose_entry
    from .version import add_version_flag, package_version, print_version_if_alone
    from .voting import CompareLimits, Tally
else:  # hidden from type checkers, which read the imports above, so that a name not public is an error

    def __getattr__(name: str) -> object:
        """A public name, imported from its module the first time it is asked for."""
        module = _HOMES.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        # The import statement's own machinery, as `from .errors import X` would run it: unlike
        # importlib.import_module, `python -X importtime` reports it (tests/project/test_startup.py).
        value = globals()[name] = getattr(__import__(module[1:], globals(), None, [name], 1), name)
        return value
