package config

// Help is the text of paperclip-runnerd --help. A test keeps it in step with
// the flags ParseArgs defines.
const Help = `paperclip-runnerd: the Paperclip runner daemon for agent sandboxes.

The Paperclip server starts one runnerd per run inside the sandbox. runnerd
connects to the server over one WebSocket (PRP, the Paperclip Runner
Protocol), keeps a durable outbox and command journal in --state-dir, and
drives coding agents over ACP, each under pcwrap. You rarely start it by hand.

USAGE
  paperclip-runnerd --build-metadata
  paperclip-runnerd --connect-url ws(s)://HOST/api/runner/v1/connect/RUN  IDENTITY [OPTIONS]
  paperclip-runnerd --listen-path /api/runner/v1/connect/RUN  IDENTITY [OPTIONS]
  paperclip-runnerd storage OPERATION [--flag value]...
  paperclip-runnerd state dump --state-dir DIR

MODES (exactly one)
  --build-metadata             Print this build's capabilities as JSON and exit.
                               Must be the only argument. The server probes it.
  --connect-url URL            Dial mode: runnerd dials the server. ws:// only
                               to loopback addresses; wss:// anywhere.
  --listen-path PATH           Listen mode: the server dials runnerd through the
                               sandbox's preview proxy. PATH must be
                               /api/runner/v1/connect/<--run-id>.
  storage OPERATION            The reference's indexed-store operations
                               (inspect-state, seal, archive-*, ...). runnerd
                               keeps no indexed store: every operation exits 1
                               with "paperclip-runnerd: storage_unsupported:
                               OPERATION" and touches nothing. Needs no ticket.
  state dump --state-dir DIR   Print the state in DIR for an operator: the
                               header fields, the outbox (sequence, type,
                               priority, size) and the records (names, sizes).
                               Reads only; works beside a live runnerd without
                               blocking it. Needs no ticket.

SECRET (environment only, never a flag)
  PAPERCLIP_RUNNER_BOOTSTRAP_TICKET
                               One-use ticket for the first authentication.
                               Required in dial and listen mode. runnerd removes
                               it from its environment before anything else, so
                               no agent or child process can see it.

CONNECTION
  --ca-bundle-path FILE        Extra PEM roots for wss:// (private file, <= 4 MiB).
  --listen-address IP          Listen mode bind address (default 0.0.0.0).
  --listen-port PORT           Listen mode bind port (default 43127). Other
                               address/port values work but log a warning: the
                               reference server's ingress reaches only 43127.
  --reconnect-delay-ms MS      Reconnect backoff base (default 25, max 5000).
  --reconnect-grace-ms MS      Exit with transport_reconnect_grace_exceeded when
                               disconnected longer than this (default: no grace).
                               The grace counts only after the first successful
                               authentication: until then runnerd keeps
                               retrying (bounded by --max-lifetime-ms).
  --max-lifetime-ms MS         Lifetime; 0 or absent = unlimited. Reached while
                               connected: suspend at the next safe point, exit 0;
                               while reconnecting: transport_reconnect_deadline_exceeded.
  --max-runtime-ms MS          Same as --max-lifetime-ms.
  --max-frame-bytes N          Largest WebSocket frame (default 1048576; 1 KiB to
                               16 MiB; the welcome's value wins within that range).
  --ping-interval-ms MS        Send a WebSocket Ping after this long without
                               sending anything (default 20000).
  --silence-timeout-ms MS      Treat the connection as half-open after this long
                               without receiving anything (default 45000).

IDENTITY (required in dial and listen mode; assigned by the server)
  --state-dir DIR              Durable state (runner-state.db, its projection
                               runner-state.json, agent sessions);
                               an absolute path.
  --runner-id ID               Runner instance id.
  --environment-lease-id ID    Environment lease id.
  --run-id ID                  Run id (also the last segment of --listen-path).
  --session-id ID              Normalized session id.
  --turn-id ID                 Turn id.
  --item-id ID                 Item id.
  --runner-version V           Version the server expects.
  --runner-digest D            Digest the server expects (sha256:<hex>).

INDEXED STATE
  --indexed-state              The server's core keeps an indexed authority
                               store. runnerd still keeps runner-state.json
                               (never runner-state.sqlite) and then requires
                               the core's challenge to carry the durability
                               and outputBodies capabilities. With or without
                               it, runnerd refuses to start (exit 1,
                               indexed_state_unsupported) when --state-dir
                               holds runner-state.sqlite.

DURABILITY AND LIFECYCLE
  --max-outbox-bytes N         Outbox hard limit (default 65536).
  --p0-reserve-bytes N         Part of the outbox kept for P0 events (default
                               32768; must be below --max-outbox-bytes).
  --lifecycle-mode MODE        per_turn (default: suspend and exit 0 once a
                               turn's events are acknowledged) or warm.
  --idle-timeout-ms MS         Warm: suspend and exit 0 after this long with no
                               command and no turn, counted from the start; if
                               no server has connected by then, exit 0 without
                               suspending. Required with warm, refused with
                               per_turn.
  --diagnostics-directory DIR  Send runnerd's output only to bounded, redacted
                               runnerd.stdout.log and runnerd.stderr.log in DIR
                               (created 0700; a symlink or a group- or
                               other-accessible directory is refused). The
                               previous run's files are kept as *.log.1.

AGENTS
  --session-open-resume-timeout-ms MS     session.open bound when adopting or
                                          resuming a session (default 30000).
  --session-open-cold-timeout-ms MS       Cold session.open bound (default 30000).
  --session-open-cold-timeout-agent AGENT=MS
                                          Cold bound for one agent; repeatable.
                                          Defaults: claude, pi, opencode = 60000.
  --cancel-grace-ms MS                    Wait for a cancelled prompt to settle
                                          before stopping the agent (default 5000).
  --workspace-baseline-timeout-ms MS      Bound of each workspace walk of a turn,
                                          before and after it (default 1000).
  --sandbox-metric-interval-ms MS         A sandbox.metric (cgroup, disk, load)
                                          this often while a turn runs (default
                                          60000; 0 disables).
  --max-concurrent-cold-starts N          Cold starts at once (default 4; <= 0
                                          disables the gate).
  --pcwrap-path FILE                      pcwrap binary (default: next to
                                          runnerd, else on PATH).
  --opencode-executable FILE              opencode binary for provider kind
                                          opencode (default: opencode on PATH).

AGENT ENVIRONMENT
  Agents get a cleared environment plus these variables, by exact name:
  every agent: PATH HOME LANG LC_* TZ TMPDIR SSL_CERT_* NODE_EXTRA_CA_CERTS
    RUST_BACKTRACE HTTP_PROXY HTTPS_PROXY NO_PROXY ALL_PROXY http_proxy
    https_proxy no_proxy all_proxy
  claude: ANTHROPIC_BASE_URL ANTHROPIC_API_KEY ANTHROPIC_AUTH_TOKEN
    CLAUDE_CODE_OAUTH_TOKEN AWS_BEARER_TOKEN_BEDROCK
  codex: OPENAI_BASE_URL OPENAI_API_KEY CODEX_API_KEY PAPERCLIP_AI_PROVIDER_KEY
  gemini: GOOGLE_GEMINI_BASE_URL GEMINI_API_KEY GOOGLE_API_KEY
  opencode: ANTHROPIC_BASE_URL OPENAI_BASE_URL ANTHROPIC_API_KEY
    OPENAI_API_KEY GEMINI_API_KEY GOOGLE_API_KEY OPENCODE_CONFIG
    OPENCODE_CONFIG_DIR OPENCODE_CONFIG_CONTENT OPENCODE_DISABLE_AUTOUPDATE
    OPENCODE_DISABLE_LSP_DOWNLOAD OPENCODE_DISABLE_DEFAULT_PLUGINS
    OPENCODE_DISABLE_MODELS_FETCH
  grok: XAI_API_KEY; cursor: CURSOR_API_KEY; copilot: COPILOT_GITHUB_TOKEN;
  pi: the names listed in PAPERCLIP_ACPX_CREDENTIAL_BINDING.
  Never: CLAUDECODE, OPENCODE_SERVER_PASSWORD. Keys, and a proxy or base
  URL's user:password, are redacted from events and logs.

LOGGING
  --log-format FORMAT          json (default) or text; logs go to stderr.
  --log-level LEVEL            debug, info (default), warn or error: the least
                               severe level logged.

ACCEPTED AND IGNORED (reference compatibility; each takes a value)
  --fake-harness, --fake-harness-script (the server passes them on every launch),
  --acpx-launch-authority-digest, --acpx-sidecar-command[-sha256],
  --acpx-sidecar-script[-sha256], --opencode-proxy-command[-sha256],
  --opencode-proxy-script[-sha256], --opencode-executable-sha256 (the digest
  of --opencode-executable, which is honoured).
  Outside dial and listen mode they are an error: the reference's local
  fake-harness mode is not implemented.

EXIT STATUS
  0  success: metadata printed, revoked, a clean per-turn or idle exit, or an
     orderly stop on SIGTERM or SIGINT
  1  failure; stderr has one line "paperclip-runnerd: <code>: <message>", e.g.
     runner_ingress_bind_conflict (the listener could not bind),
     transport_reconnect_grace_exceeded,
     transport_reconnect_deadline_exceeded, lease_expired_requires_bootstrap,
     bootstrap_failed_closed (the ticket may be used up: start again with a
     fresh one), indexed_state_unsupported, storage_unsupported; and, as the
     reference exits 1 for them too, with nothing started:
     bootstrap_ticket_missing, bootstrap_ticket_invalid, connect_url_invalid
     (a malformed --connect-url, or ws:// to an address that is not loopback)
  2  usage: a bad flag, or a missing or conflicting mode; nothing was
     started. The line reads "paperclip-runnerd: usage: ...",
     except for a bad --listen-path or --listen-address, whose line starts
     with runner_ingress_bind_conflict, the code the server looks for.

SIGNALS
  SIGTERM, SIGINT  orderly stop: save state, stop agents, exit.
`
