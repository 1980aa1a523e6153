"""The server's one config object: every field is a flag of `python -m service` and a FILL_* variable."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from common.errors import AppError
from fill.config import EngineConfig

ENV_PREFIX = "FILL_"
Role = Literal["fill", "admin"]
ROLES: tuple[Role, ...] = ("fill", "admin")  # fill: /fill, /score and the read-only routes; admin: every route
LogLevel = Literal["debug", "info", "warning", "error", "critical"]  # the most verbose first


class Settings(EngineConfig, BaseSettings):
    """Serve POST /fill over a phrase index."""

    # The engine's fields (index, model, scoring, device, dtype, verify, nprobe, ef_search, refine) are
    # EngineConfig's; engine_config() gives them alone. The server's own fields follow.

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX)

    host: str = Field("127.0.0.1", description="bind address")
    port: int = Field(8000, ge=0, le=65535, description="port")
    warm: bool = Field(
        True,
        description="after start, map every page of the stored vectors into the process in the "
        "background, so re-scoring takes no page faults (the file-backed RSS grows to the vectors' size; "
        "those pages stay reclaimable page cache)",
    )
    max_concurrency: int = Field(
        64,
        ge=1,
        description="requests in flight at once (waiting for a batch or being computed); more get 429 with Retry-After",
    )
    max_batch: int = Field(32, ge=1, description="most requests encoded and searched together in one batch")
    batch_tokens: int = Field(
        4096, ge=1, description="most query tokens in one batch (a longer single query still forms a batch of its own)"
    )
    batch_wait_ms: float = Field(
        0.0,
        ge=0,
        le=10000,
        description="after a batch's first request, wait this long "
        "for more (0: batch whatever waits when the previous batch is done)",
    )
    malloc_arenas: int = Field(
        2,
        ge=0,
        le=1024,
        description="glibc malloc arenas the server's threads share (common.process.limit_arenas; 0: glibc's default, "
        "8 per core; MALLOC_ARENA_MAX in the environment wins): fewer keep less freed memory resident",
    )
    fill_workers: int = Field(
        2, ge=1, le=256, description="threads finishing fills after their batch (BM25, candidate spans, ranking)"
    )
    request_timeout: float = Field(
        10.0, gt=0, description="seconds a fill may take from admission; later it stops computing and gets 504"
    )
    max_candidates: int = Field(
        102400,
        ge=1,
        description="cost budget: masks x (k + blocks x block tokens) x max_span_tokens, the candidate "
        "spans of a fill (k counts in dense and hybrid modes, blocks in restricted and hybrid); of a closed-set "
        "score, masks x queries x (k + blocks x block tokens), the tokens scored; the default admits one default "
        "one-mask score (1 x 2 x 200 x 256) or ~5.7 default one-mask hybrid fills (1 x (1024 + 3 x 256) x 10 "
        "each); over it: 422",
    )
    max_evidence: int = Field(
        600, ge=1, description="cost budget: masks x top_k x evidence, the occurrences a request returns; over it: 422"
    )
    max_search: int = Field(
        16384,
        ge=1,
        description="cost budget: masks x queries x k, the hits a request's FAISS "
        "searches return and re-score (a fill has 2 queries per mask; 0 in restricted mode); the "
        "default is 8 default one-mask fills (2 x 1024 each); over it: 422",
    )
    max_matches: int = Field(
        2**26,
        ge=1,
        description="cost budget of POST /score: masks x queries x retrieved tokens x phrase lookups, each done "
        "at each retrieved token (per choice one for its one-token phrases and synonyms together, one per phrase of "
        "several tokens); the default, ~8 default fills, admits a default one-mask score (102,400 retrieved tokens) "
        "of up to 655 lookups: 64 choices of one-token phrases with their synonyms, or e.g. 64 choices of 10 "
        "two-word phrases; over it: 422",
    )
    heavy_weight: float = Field(
        2.0,
        gt=0,
        description="a request costing more than this many default fills (the "
        "larger of its search and candidates over a default fill's) is served in the heavy "
        "lane: its own batches and workers, so cheap requests never queue behind its finish step",
    )
    heavy_workers: int = Field(1, ge=1, le=256, description="threads finishing the heavy lane's requests")
    heavy_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="CPU priority (nice, 19 the lowest) of the heavy lane's "
        "batch thread (its searches) and worker threads (the encoder's thread keeps its own): cheap "
        "requests keep the cores",
    )
    max_body_bytes: int = Field(
        65536,
        ge=1024,
        description="largest request body; a larger one gets 413 before it is "
        "read (a fill request with every option is under 3 KB)",
    )
    max_documents_bytes: int = Field(
        64 * 2**20,
        ge=1024,
        description="largest body of POST /admin/documents (the "
        "documents to add); a larger one gets 413 before it is read",
    )
    max_delta_shards: int = Field(
        64,
        ge=1,
        description="POST /admin/documents is refused (503 saying how to compact) "
        "once the served index holds this many delta shards: each is searched apart (fills "
        "slow down) and keeps its BM25 file open; `indexer compact` folds them into regular "
        "shards",
    )
    admin_timeout: float = Field(
        300.0,
        gt=0,
        description="seconds POST /admin/documents may encode its documents; "
        "past them the change stops before it is committed (nothing changes, the writer lock "
        "is released) and gets 504: send fewer documents per request, or run `indexer add` on "
        "the index and POST /admin/reload",
    )
    update_nice: int = Field(
        19,
        ge=0,
        le=19,
        description="CPU priority (nice, 19 the lowest) of the thread that "
        "encodes the documents of POST /admin/documents, which its encoder threads inherit: the "
        "fills running meanwhile keep the cores",
    )
    check_hashes: bool = Field(
        True,
        description="read every index file and compare its sha256 with the manifest's: "
        "at start (before ready with check_before_ready, else in the background with the "
        "warming: a mismatch turns the server not ready, 503 naming the file), and before a "
        "reload swaps (a reload of the served directory that finds a file damaged re-checks the "
        "served files too)",
    )
    check_before_ready: bool = Field(
        True,
        description="with check_hashes, stay not ready at start until every file's "
        "sha256 is checked (costs the hashing time, ~1 s per GB read; a damaged index "
        "then serves no fill and the server exits naming the file); false: ready at once, "
        "checked in the background",
    )
    check_before_ready_max_gb: float = Field(
        1.0,
        ge=0,
        description="check_before_ready only for an index of at most this many GB on disk (hashing costs ~1 s a "
        "GB of time to ready): a larger one is ready once opened (every file's structure checked; every read of "
        "its vectors, arrays and documents checked block by block) and its files are hashed in the background, "
        "so time to ready does not grow with the index",
    )
    recheck_seconds: float = Field(
        10.0,
        ge=0,
        description="every this many seconds, look for served index files "
        "written or replaced since they were checked (inode, size, modification time: "
        "microseconds per file; not removed ones: writers beside the server collect a "
        "superseded generation's) and hash those again; a mismatch turns the server not "
        "ready (503 naming the file) until a reload serves a sound index. 0: off",
    )
    header_timeout: float = Field(
        10.0, gt=0, description="seconds a client has to send a request's headers; slower connections are closed"
    )
    body_timeout: float = Field(
        30.0,
        gt=0,
        description="seconds a client has to send a request's body after its "
        "headers; a body not complete by then gets 408 and the connection closes (a body trickling in holds no "
        "connection)",
    )
    max_header_bytes: int = Field(
        16384,
        ge=1024,
        le=2**20,
        description="largest request head (request line and headers, in bytes); a larger one gets 431, "
        "whether it arrives in one piece or a few bytes at a time",
    )
    probe_rate: float = Field(
        10.0,
        ge=0,
        description="requests a second each client address may make to the unkeyed probes (/healthz, /readyz, "
        "GET and HEAD), past a burst of probe_burst: more get 429 with Retry-After (a kubelet probes a few times a "
        "second at most, never limited); 0: no limit",
    )
    probe_burst: int = Field(
        20, ge=1, description="probe requests one client address may make at once before probe_rate limits it"
    )
    api_keys: str | None = Field(
        None,
        description="comma-separated fill keys: when any key is set (here, admin_keys or api_keys_file), every route "
        "but the probes (/healthz, /readyz), the page (/, /page/...) and /favicon.ico needs `Authorization: Bearer "
        "<key>`, else 401; a fill key may use /fill, /score and the read-only routes, not /admin/* (403)",
    )
    admin_keys: str | None = Field(
        None, description="comma-separated admin keys: every route, the admin routes (/admin/*) too"
    )
    api_keys_file: Path | None = Field(
        None,
        description="file of keys, one per line: `<key>` (a fill key) or `<key> admin` (# comments and blank lines "
        "ignored); adds to api_keys and admin_keys",
    )
    reload_root: Path | None = Field(
        None,
        description="POST /admin/reload serves only directories under this one; none: the directory that holds "
        "the configured index",
    )
    cors_origins: str = Field("", description="comma-separated origins allowed by CORS (`*` for any); empty: CORS off")
    page: bool = Field(
        True,
        description="serve the page to try fills and scores in a browser at GET / (service/page; false: the API only)",
    )
    backend: Literal["local", "ray"] = Field(
        "local",
        description="local: every shard in this process; ray: the shards in shard groups on a Ray cluster "
        "(Ray Serve applications, service.ray_backend) and this server the ingress; needs `pip install .[ray]`",
    )
    ray_address: str | None = Field(
        None,
        description="Ray cluster to join (backend ray): `auto`, `host:6379` or "
        "`ray://host:10001`; none: start a Ray on this machine",
    )
    ray_namespace: str = Field("npm", min_length=1, description="Ray namespace of the shard groups (backend ray)")
    ray_app: str = Field(
        "npm",
        min_length=1,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="name prefix of the shard "
        "groups' Serve applications, <prefix>-group-<n> (backend ray; one prefix per index served)",
    )
    ray_groups: int = Field(
        1,
        ge=1,
        le=1024,
        description="shard groups (backend ray): the index's shards split into "
        "this many runs of consecutive shards (at most one group per shard)",
    )
    ray_replicas: int = Field(1, ge=1, le=1024, description="replicas of each shard group (backend ray)")
    ray_deploy: bool = Field(
        True,
        description="deploy the shard groups from this server (backend ray); false: "
        "attach to the groups a Serve config deploys (deploy/ray/serve.yaml)",
    )
    ray_timeout: float = Field(
        10.0,
        gt=0,
        description="seconds a shard group has to answer one call (backend ray); "
        "later the request gets 503 naming the group",
    )
    log_level: LogLevel = Field(
        "info", description="the least severe level logged (any case): debug, info, warning, error or critical"
    )
    log_format: Literal["json", "text"] = Field(
        "json",
        description="json: one JSON object per line (time, level, logger, message, request_id, ...); text: plain lines",
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _any_case(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    def keys(self) -> dict[str, Role]:
        """Every configured key with its role, from api_keys, admin_keys and api_keys_file (empty: no
        authentication), or an AppError naming the file that cannot be read or its line that names no role."""
        given: list[tuple[str, Role]] = [(k, "fill") for k in _split(self.api_keys)]
        given += [(k, "admin") for k in _split(self.admin_keys)]
        if self.api_keys_file is not None:
            given += _keys_file(self.api_keys_file)
        keys: dict[str, Role] = {}
        for key, role in given:  # a key given with both roles, anywhere, is an admin key
            keys[key] = "admin" if "admin" in (role, keys.get(key)) else role
        return keys

    def origins(self) -> list[str]:
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]


def _split(keys: str | None) -> list[str]:
    return [k.strip() for k in (keys or "").split(",") if k.strip()]


def _keys_file(path: Path) -> list[tuple[str, Role]]:
    """The keys of a keys file (`<key>` or `<key> <role>` per line), or an AppError naming the file."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise AppError(
            f"cannot read the API keys file {path} (--api-keys-file / FILL_API_KEYS_FILE): "
            f"{exc.strerror if isinstance(exc, OSError) else exc}"
        ) from None
    keys: list[tuple[str, Role]] = []
    for number, line in enumerate(lines, 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        role = words[1] if len(words) > 1 else "fill"
        if len(words) > 2 or role not in ROLES:
            raise AppError(
                f"the API keys file {path}, line {number}: write `<key>` or `<key> <role>` with a role of "
                f"{' or '.join(ROLES)}"
            )
        keys.append((words[0], role))  # checked against ROLES just above
    if not keys:
        raise AppError(f"the API keys file {path} holds no key; write one key per line")
    return keys


@lru_cache
def get_settings() -> Settings:
    return Settings()
