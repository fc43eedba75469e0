"""FlowForge's settings, validated once at start-up.

Every setting has one home here and one environment variable; the rest of the code takes
a config object and never spells a broker URL, exchange or queue name itself. An invalid
setting raises ``ConfigurationError`` naming the variable and what to check.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import unquote, urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    model_validator,
)

from flowforge import errors


class BrokerConfig(BaseModel):
    """Where RabbitMQ is and how the dispatch topology is named."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: The environment variable behind each field that ``from_env`` reads.
    ENVIRONMENT: ClassVar[Mapping[str, str]] = {
        "url": "FLOWFORGE_BROKER_URL",
        "exchange": "FLOWFORGE_DISPATCH_EXCHANGE",
        "queue": "FLOWFORGE_DISPATCH_QUEUE",
        "routing_key": "FLOWFORGE_DISPATCH_ROUTING_KEY",
        "dead_letter_exchange": "FLOWFORGE_DEAD_LETTER_EXCHANGE",
        "dead_letter_queue": "FLOWFORGE_DEAD_LETTER_QUEUE",
    }

    # repr=False: the URL carries the password, and configs end up in logs.
    #: One URL, or several separated by commas: the nodes of a cluster, tried in order on
    #: every (re)connect, so a process fails over to the first node that answers.
    url: str = Field("amqp://guest:guest@127.0.0.1:5672/%2F", repr=False)
    exchange: str = Field("flowforge", min_length=1)
    #: The prefix of every task type's queue (``queue_for``); before routing (issue
    #: #32) the one dispatch queue of every type, which ``flowforge broker migrate``
    #: empties into the per-type queues.
    queue: str = Field("flowforge.tasks", min_length=1)
    #: The dead letters' routing key (and the old single queue's binding).
    routing_key: str = Field("flowforge.tasks", min_length=1)
    dead_letter_exchange: str = Field("flowforge.dlx", min_length=1)
    dead_letter_queue: str = Field("flowforge.tasks.dead", min_length=1)
    #: Deliveries of one message before the quorum queue dead-letters it (poison message).
    #: Where ``url`` came from, as messages should name it: the variable or the flag.
    url_setting: str = Field("FLOWFORGE_BROKER_URL", repr=False)
    delivery_limit: int = Field(20, ge=1)
    heartbeat_seconds: int = Field(30, ge=1)

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] = os.environ, *, url_setting: str | None = None
    ) -> BrokerConfig:
        """The defaults, overridden by whichever ``FLOWFORGE_*`` variables are set.

        ``url_setting`` names where the URL came from when not the variable (a flag).
        """
        fields = {field: environ[var] for field, var in cls.ENVIRONMENT.items() if var in environ}
        return cls.model_validate(fields | ({"url_setting": url_setting} if url_setting else {}))

    def for_deployment(self, deployment: str) -> BrokerConfig:
        """This config with every topology name not set explicitly derived from the
        deployment's id (``flowforge.<id>.tasks`` ...), so deployments sharing a broker
        never share a queue unless told to.

        The names set explicitly (``FLOWFORGE_DISPATCH_QUEUE`` and the others) win.
        """
        derived = {
            name: template.format(deployment=deployment)
            for name, template in DEPLOYMENT_TOPOLOGY.items()
            if name not in self.model_fields_set
        }
        return self.model_copy(update=derived)

    def queue_for(self, task_type: str) -> str:
        """The dispatch queue of ``task_type``: ``<queue>.<type>``, e.g.
        ``flowforge.<deployment>.tasks.extract``. A dispatch goes only to its type's
        queue, and a worker consumes only the queues of the types it has handlers for.

        The name is also the queue's routing key: unique per deployment (unlike the
        bare type), so two deployments sharing an exchange never cross.
        """
        return f"{self.queue}.{task_type}"

    @model_validator(mode="wrap")
    @classmethod
    def _translate_errors(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """Raise ``ConfigurationError`` naming the setting, never a pydantic traceback."""
        try:
            config = handler(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{_setting_name(error['loc'])}: {error['msg']}"
                for error in exc.errors(include_url=False, include_input=False)
            )
            raise errors.ConfigurationError(f"Invalid broker configuration: {problems}.") from exc
        for url in config.urls:
            _check_url(url, config.url_setting)
        return config

    @property
    def urls(self) -> tuple[str, ...]:
        """The broker nodes' URLs, in the order a connection tries them."""
        return tuple(url.strip() for url in self.url.split(","))


#: The topology names of a deployment: each topology field's default, with the id in it.
DEPLOYMENT_TOPOLOGY: Mapping[str, str] = {
    "exchange": "flowforge.{deployment}",
    "queue": "flowforge.{deployment}.tasks",
    "routing_key": "flowforge.{deployment}.tasks",
    "dead_letter_exchange": "flowforge.{deployment}.dlx",
    "dead_letter_queue": "flowforge.{deployment}.tasks.dead",
}


def _setting_name(loc: tuple[int | str, ...]) -> str:
    field = str(loc[0]) if loc else "(config)"
    variable = BrokerConfig.ENVIRONMENT.get(field)
    return f"{variable} (BrokerConfig.{field})" if variable else f"BrokerConfig.{field}"


def _check_url(url: str, setting: str) -> None:
    """Each URL must be amqp:// or amqps:// with a host. Credentials are never echoed."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - urlsplit checks the port only when it is read
    except ValueError as exc:
        raise errors.ConfigurationError(
            f"{setting} is not a valid URL ({exc}). Check it has the form "
            f"amqp://user:password@host:5672/vhost."
        ) from exc
    if parts.scheme not in ("amqp", "amqps") or not host:
        raise errors.ConfigurationError(
            f"{setting} must be an amqp:// or amqps:// URL with a host, like "
            f"amqp://user:password@rabbitmq.example:5672/%2F; got scheme "
            f"{parts.scheme or '(none)'!r} and host {host or '(none)'!r}. Check it for a "
            f"missing scheme or host, or a typo."
        )


def _switch(environ: Mapping[str, str], variable: str, *, default: bool) -> bool:
    """An on/off setting; anything else is refused, naming the variable."""
    value = environ.get(variable, "").strip().lower()
    if not value:
        return default
    if value not in _SWITCH:
        raise errors.ConfigurationError(f"{variable} must be on or off, got {value!r}")
    return _SWITCH[value]


#: With no configuration FlowForge runs embedded: SQLite in the working directory.
DEFAULT_DATABASE_URL = "sqlite:///.flowforge/flowforge.db"
#: Its file (``./.flowforge/flowforge.db``).
DEFAULT_DATABASE_FILE = Path(unquote(urlsplit(DEFAULT_DATABASE_URL).path[1:]))
DATABASE_URL_VARIABLE = "FLOWFORGE_DATABASE_URL"
#: Where the wake-up listeners connect, when not through the database URL (PgBouncer).
LISTEN_DATABASE_URL_VARIABLE = "FLOWFORGE_LISTEN_DATABASE_URL"
#: "off" behind a pooler that cannot keep server-side prepared statements.
PREPARED_STATEMENTS_VARIABLE = "FLOWFORGE_PREPARED_STATEMENTS"
_SWITCH = {"on": True, "off": False}


#: Retention (docs/operations.md): runs that ended longer ago than this are archived by
#: the scheduler, into files in ``FLOWFORGE_ARCHIVE_DIR``. Unset: nothing is archived.
ARCHIVE_AFTER_VARIABLE = "FLOWFORGE_ARCHIVE_AFTER"
ARCHIVE_DIR_VARIABLE = "FLOWFORGE_ARCHIVE_DIR"
#: Where the archive files go when only the age is set.
DEFAULT_ARCHIVE_DIR = Path(".flowforge/archive")
_AGE_PART = r"(\d+(?:\.\d+)?)([dhms])"
_AGE = re.compile(rf"(?:{_AGE_PART})+")
_AGE_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_age(text: str, setting: str = "the age") -> timedelta:
    """An age such as ``30d``, ``12h``, ``1d12h`` or ``90m`` (d, h, m, s); a
    ``ConfigurationError`` naming ``setting`` if it is none."""
    compact = text.strip().lower()
    if not _AGE.fullmatch(compact):
        raise errors.ConfigurationError(
            f"{setting} must be an age such as 30d, 12h, 1d12h or 90m; got {text!r}"
        )
    return timedelta(
        seconds=sum(float(n) * _AGE_UNITS[unit] for n, unit in re.findall(_AGE_PART, compact))
    )


class RetentionConfig(BaseModel):
    """The retention the scheduler applies on its own: archive the runs that ended more
    than ``archive_after`` ago into files in ``archive_dir`` (docs/operations.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    archive_after: timedelta
    archive_dir: Path = DEFAULT_ARCHIVE_DIR

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> RetentionConfig | None:
        """The retention ``FLOWFORGE_ARCHIVE_AFTER`` (and ``_DIR``) set; None: none."""
        after = environ.get(ARCHIVE_AFTER_VARIABLE, "").strip()
        if not after:
            return None
        directory = environ.get(ARCHIVE_DIR_VARIABLE, "").strip()
        return cls(
            archive_after=parse_age(after, ARCHIVE_AFTER_VARIABLE),
            archive_dir=Path(directory) if directory else DEFAULT_ARCHIVE_DIR,
        )


class Settings(BaseModel):
    """Where the database is and, if configured, the broker (else: in-process dispatch)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    database_url: str = Field(DEFAULT_DATABASE_URL, repr=False)
    listen_database_url: str | None = Field(None, repr=False)
    prepared_statements: bool = True
    broker: BrokerConfig | None = None
    retention: RetentionConfig | None = None

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] = os.environ, *, broker_url_setting: str | None = None
    ) -> Settings:
        broker = (
            BrokerConfig.from_env(environ, url_setting=broker_url_setting)
            if BrokerConfig.ENVIRONMENT["url"] in environ
            else None
        )
        url = environ.get(DATABASE_URL_VARIABLE, DEFAULT_DATABASE_URL)
        listen_url = environ.get(LISTEN_DATABASE_URL_VARIABLE) or None
        return cls(
            database_url=url,
            listen_database_url=listen_url,
            prepared_statements=_switch(environ, PREPARED_STATEMENTS_VARIABLE, default=True),
            broker=broker,
            retention=RetentionConfig.from_env(environ),
        )

    @property
    def embedded(self) -> bool:
        return self.broker is None
