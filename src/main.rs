//! The `lathe` binary: parse the command line, send logs to stderr (or a
//! file), load the configuration, and serve ACP on stdio until the editor
//! closes stdin or a signal arrives. `anyhow` lives here and nowhere else.

use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use lathe::config::{Config, ConfigOrigin, ConfigSource};

/// A coding agent for your editor: speaks the Agent Client Protocol on
/// stdin/stdout and drives any OpenAI-compatible model.
///
/// Editors (Zed, JetBrains, Neovim, Emacs, acpx) start `lathe` as a
/// subprocess; there is nothing to type. Configuration is read from --config,
/// else $LATHE_CONFIG, else $XDG_CONFIG_HOME/lathe/config.toml
/// (~/.config/lathe/config.toml), else the OPENAI_BASE_URL, OPENAI_API_KEY
/// and OPENAI_MODEL environment variables, else the one model server found
/// running on this machine (Ollama, LM Studio, llama.cpp, vLLM). `lathe
/// setup` writes a config.
#[derive(Debug, Parser)]
#[command(name = "lathe", version = lathe::build_info::SUMMARY, about, long_about)]
struct Cli {
    /// What to do; without one, serve ACP on stdio.
    #[command(subcommand)]
    command: Option<Command>,
    /// The config file to use.
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Log filter for stderr (or --log-file): error, warn, info, debug, trace,
    /// or a tracing directive such as `lathe=debug`. Overrides RUST_LOG.
    #[arg(long, global = true, value_name = "LEVEL")]
    log_level: Option<String>,
    /// Append logs to this file instead of stderr.
    #[arg(long, global = true, value_name = "PATH")]
    log_file: Option<PathBuf>,
    /// Where sessions are saved. Default: $LATHE_DATA_DIR, else
    /// $XDG_DATA_HOME/lathe (~/.local/share/lathe).
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Write every JSON-RPC message (both ways) and every model request and
    /// response event to this file, one JSON line each, API keys and
    /// credentials redacted. For troubleshooting; works with every command.
    #[arg(long, global = true, value_name = "FILE", env = "LATHE_TRACE")]
    trace: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// lathe's own trampoline: starts a command with a scrubbed environment
    /// and kills its process group when lathe dies (see `lathe::platform::process`).
    #[command(name = "sandbox-exec", hide = true)]
    // Boxed: its arguments are far larger than the other commands' (a
    // `Command` is moved around by value).
    SandboxExec(Box<lathe::platform::process::SandboxExecArgs>),
    /// Check the setup: the config file, each model's endpoint (reachable,
    /// key accepted, model listed, streaming, tool calls, usage, context
    /// window), the data directory, the MCP servers and the sandbox. One
    /// line per check; exits 1 if any check fails.
    Doctor(lathe::doctor::DoctorArgs),
    /// The saved sessions: list, show (as Markdown), rm, prune.
    #[command(subcommand)]
    Sessions(lathe::cli::sessions::SessionsCommand),
    /// The permission rules kept beyond a session: list, rm, clear, and
    /// import a repository's .lathe/permissions.toml rule by rule.
    #[command(subcommand)]
    Permissions(lathe::cli::permissions::PermissionsCommand),
    /// Write a commented config file for a provider preset to the default
    /// location (or --config); never overwrites.
    Init(lathe::cli::init::InitArgs),
    /// Set lathe up on this terminal: choose a model server (one running
    /// here, a preset, or a URL), give its key (pasted, never shown, or an
    /// environment variable), pick a model, check it as `lathe doctor` does,
    /// and write the config (mode 0600). What an editor's "Set up lathe"
    /// button runs.
    Setup(lathe::cli::setup::SetupArgs),
    /// Forget the API keys `lathe setup` stored (what an editor's logout
    /// does); keys in environment variables are yours and stay.
    Logout,
    /// Print a shell completion script: `lathe completions bash > ~/.local/share/bash-completion/completions/lathe`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff): `lathe man | man -l -`.
    Man,
    /// Run one prompt from the terminal: the answer on stdout, the rest on
    /// stderr. Exit 0 done, 1 error, 2 usage, 3 stopped short, 130 cancelled.
    Exec(lathe::term::ExecArgs),
    /// Chat with lathe on this terminal.
    Chat(lathe::term::ChatArgs),
}

/// `lathe sandbox-exec ...` as lathe and editors start it, the subcommand
/// first: its own arguments parsed alone. Parsing the whole command line
/// builds every subcommand's arguments (clap), which the trampoline never
/// needs: about 0.15 ms of CPU and 40 page faults at every command's start
/// (BENCHMARKS.md). With a global option first, the whole parse still
/// dispatches it.
#[derive(Debug, Parser)]
#[command(name = "lathe sandbox-exec")]
struct Trampoline {
    #[command(flatten)]
    args: lathe::platform::process::SandboxExecArgs,
}

fn main() -> ExitCode {
    let mut argv = std::env::args_os();
    if argv.nth(1).is_some_and(|first| first == lathe::platform::process::TRAMPOLINE_SUBCOMMAND) {
        let name = std::ffi::OsString::from("lathe sandbox-exec");
        return trampoline(Trampoline::parse_from(std::iter::once(name).chain(argv)).args);
    }
    let mut cli = Cli::parse();
    let command = cli.command.take();
    if let Some(Command::SandboxExec(args)) = command {
        return trampoline(*args);
    }
    let outcome = match command {
        Some(command) => run_command(cli, command),
        None => run(cli),
    };
    lathe::trace::finish();
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("lathe: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // An editor shows lathe's stderr to the user (agent-shell prints every
    // line as a notice): warnings and errors only.
    init_logging(cli.log_level.as_deref(), cli.log_file.as_deref(), SERVE_LOG_FILTER)?;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the async runtime")?;
    let Some(config) = session_config(&cli, &runtime)? else { return Ok(ExitCode::from(2)) };
    if std::io::stdin().is_terminal() {
        greet(&config);
    }
    tracing::info!(config = %config.source, model = %config.default_model, "lathe {} starting", lathe::build_info::SUMMARY);
    let result = runtime.block_on(lathe::serve_stdio(config, shutdown_signal()));
    // Do not wait for blocking work (a search walker, say) that ignored cancellation.
    runtime.shutdown_timeout(Duration::from_millis(250));
    result.context("serving ACP on stdio")?;
    Ok(ExitCode::SUCCESS)
}

/// The commands other than serving ACP.
fn run_command(cli: Cli, command: Command) -> anyhow::Result<ExitCode> {
    use std::io::Write as _;
    let env = |name: &str| std::env::var(name).ok();
    let mut stdout = std::io::stdout().lock();
    match command {
        Command::Completions { shell } => {
            // Into memory first: clap_complete panics on a write error (a closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut <Cli as clap::CommandFactory>::command(), "lathe", &mut script);
            stdout.write_all(&script).context("writing the completion script")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Man => {
            clap_mangen::Man::new(<Cli as clap::CommandFactory>::command())
                .render(&mut stdout)
                .context("writing the man page")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Init(args) => {
            let path = lathe::config::locate(cli.config.as_deref(), &env).map(|(path, _)| path);
            match lathe::cli::init::run(&args, path.as_deref(), &mut stdout) {
                Ok(()) => Ok(ExitCode::SUCCESS),
                Err(err) => {
                    eprintln!("lathe init: {err}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        Command::Sessions(command) => {
            init_logging(cli.log_level.as_deref(), cli.log_file.as_deref(), "warn")?;
            let data_dir = lathe::store::default_data_dir(cli.data_dir.as_deref(), &env);
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            let mut stderr = std::io::stderr();
            let terminal = std::io::stdout().is_terminal();
            let ran = lathe::cli::sessions::run(command, data_dir.as_deref(), &mut stdout, terminal, &mut stderr);
            match runtime.block_on(ran) {
                Ok(()) => Ok(ExitCode::SUCCESS),
                // Each failed removal was reported already.
                Err(lathe::cli::sessions::SessionsError::Partly(_)) => Ok(ExitCode::FAILURE),
                Err(err @ lathe::cli::sessions::SessionsError::RawToTerminal) => {
                    eprintln!("lathe sessions: {err}");
                    Ok(ExitCode::from(2))
                }
                Err(err) => {
                    // It may quote a stored file (a session's id, a parse error's excerpt).
                    let said = err.to_string();
                    eprintln!(
                        "lathe sessions: {}",
                        lathe::present::text::shown(&said, lathe::present::text::Lines::One)
                    );
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        Command::Permissions(command) => {
            init_logging(cli.log_level.as_deref(), cli.log_file.as_deref(), "warn")?;
            let places = lathe::cli::permissions::Places {
                cwd: std::env::current_dir().context("reading the current directory")?,
                data_dir: lathe::store::default_data_dir(cli.data_dir.as_deref(), &env),
                user_dir: lathe::config::user_dir(&env),
            };
            let mut input = std::io::stdin().lock();
            let terminal =
                lathe::cli::permissions::Terminal { interactive: std::io::stdin().is_terminal(), input: &mut input };
            match lathe::cli::permissions::run(command, &places, &mut stdout, terminal) {
                Ok(()) => Ok(ExitCode::SUCCESS),
                Err(lathe::cli::permissions::PermissionsError::Usage(message)) => {
                    eprintln!("lathe permissions: {message}");
                    Ok(ExitCode::from(2))
                }
                Err(err) => {
                    eprintln!(
                        "lathe permissions: {}",
                        lathe::present::text::shown(&err.to_string(), lathe::present::text::Lines::One)
                    );
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        Command::Doctor(args) => {
            init_logging(cli.log_level.as_deref(), cli.log_file.as_deref(), "error")?;
            let data_dir = lathe::store::default_data_dir(cli.data_dir.as_deref(), &env);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            let origin = ConfigOrigin::process(cli.config.clone());
            let loaded = runtime.block_on(lathe::discover::load_config(&origin)).map(|mut config| {
                config.data_dir = data_dir.clone();
                config.sandbox.deny_read.extend(data_dir.clone());
                // MCP servers and the sandbox are checked as a session would start them.
                config.children.supervisor = std::env::current_exe().ok();
                config
            });
            let located = lathe::config::locate(cli.config.as_deref(), &env).map(|(path, _)| path);
            start_trace(cli.trace.as_deref(), loaded.as_ref().ok())?;
            let report = runtime.block_on(lathe::doctor::run(&args, loaded, located, data_dir));
            runtime.shutdown_timeout(Duration::from_millis(250));
            report.write(&mut stdout, args.json).context("writing the report")?;
            stdout.flush().context("writing the report")?;
            Ok(if report.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        Command::Setup(_) => {
            init_logging(cli.log_level.as_deref(), cli.log_file.as_deref(), "error")?;
            if !std::io::stdin().is_terminal() {
                eprintln!(
                    "lathe setup: it asks questions, so it runs on a terminal; in a script, use `lathe init --preset NAME`"
                );
                return Ok(ExitCode::from(2));
            }
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            let discovery = lathe::discover::Plan::from_env(&env).unwrap_or_else(|why| {
                eprintln!("lathe setup: {why}; not looking for model servers running here");
                None
            });
            let cx = lathe::cli::setup::Context {
                path: lathe::config::locate(cli.config.as_deref(), &env).map(|(path, _)| path),
                user_dir: lathe::config::user_dir(&env),
                env: &env,
                discovery,
            };
            let mut prompter = lathe::cli::setup::TerminalPrompter::new(&mut stdout);
            let outcome = runtime.block_on(lathe::cli::setup::run(&mut prompter, &cx));
            runtime.shutdown_timeout(Duration::from_millis(250));
            match outcome {
                Ok(_) => Ok(ExitCode::SUCCESS),
                Err(err) => {
                    eprintln!("lathe setup: {err}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        Command::Logout => match lathe::config::user_dir(&env) {
            Some(dir) => match lathe::credentials::forget(&dir) {
                Ok(true) => {
                    writeln!(
                        stdout,
                        "lathe: forgot the keys `lathe setup` stored ({} is gone).",
                        lathe::credentials::path(&dir).display()
                    )
                    .context("writing to stdout")?;
                    Ok(ExitCode::SUCCESS)
                }
                Ok(false) => {
                    writeln!(stdout, "lathe: there was no stored key to forget.").context("writing to stdout")?;
                    Ok(ExitCode::SUCCESS)
                }
                Err(err) => {
                    eprintln!("lathe logout: {err}");
                    Ok(ExitCode::FAILURE)
                }
            },
            None => {
                eprintln!("lathe logout: HOME and XDG_CONFIG_HOME are unset: there is no config directory");
                Ok(ExitCode::FAILURE)
            }
        },
        command @ (Command::Exec(_) | Command::Chat(_)) => {
            drop(stdout);
            run_terminal(cli, command)
        }
        Command::SandboxExec(_) => unreachable_sandbox_exec(),
    }
}

/// `lathe exec` and `lathe chat` (see `lathe::term`).
fn run_terminal(cli: Cli, command: Command) -> anyhow::Result<ExitCode> {
    // On a terminal front end a person reads stderr: what lathe found and
    // did (the model's limits, servers started) is for them too.
    init_logging(cli.log_level.as_deref(), cli.log_file.as_deref(), TERMINAL_LOG_FILTER)?;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the async runtime")?;
    let Some(config) = session_config(&cli, &runtime)? else { return Ok(ExitCode::from(lathe::term::exit::USAGE)) };
    let code = match command {
        Command::Exec(args) => runtime.block_on(lathe::term::exec(config, args)),
        Command::Chat(args) => lathe::term::chat(config, args, &runtime),
        Command::SandboxExec(_)
        | Command::Doctor(_)
        | Command::Sessions(_)
        | Command::Permissions(_)
        | Command::Init(_)
        | Command::Setup(_)
        | Command::Logout
        | Command::Completions { .. }
        | Command::Man => lathe::term::exit::USAGE,
    };
    runtime.shutdown_timeout(Duration::from_millis(250));
    Ok(ExitCode::from(code))
}

/// The config sessions run with (serving ACP, `exec`, `chat`): loaded
/// (with no config at all, the model server found running here), its data
/// directory, the trace started, children supervised by this executable.
/// `None` when it cannot be loaded (said on stderr: a usage error).
fn session_config(cli: &Cli, runtime: &tokio::runtime::Runtime) -> anyhow::Result<Option<Config>> {
    let env = |name: &str| std::env::var(name).ok();
    let origin = ConfigOrigin::process(cli.config.clone());
    let mut config = match runtime.block_on(lathe::discover::load_config(&origin)) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("lathe: {err}");
            return Ok(None);
        }
    };
    config.data_dir = lathe::store::default_data_dir(cli.data_dir.as_deref(), &env);
    // Other projects' sessions are there: no sandboxed command reads them.
    config.sandbox.deny_read.extend(config.data_dir.clone());
    start_trace(cli.trace.as_deref(), Some(&config))?;
    // Every child is started through this executable, which supervises it.
    config.children.supervisor = match std::env::current_exe() {
        Ok(path) => Some(path),
        Err(err) => {
            tracing::warn!(%err, "cannot find lathe's own executable; child processes will not be supervised");
            None
        }
    };
    Ok(Some(config))
}

/// The trampoline: nothing else of lathe runs here (no logging, no config,
/// no runtime).
fn trampoline(args: lathe::platform::process::SandboxExecArgs) -> ExitCode {
    if args.probe {
        return match writeln!(std::io::stdout(), "{}", lathe::platform::process::sandbox_probe()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::FAILURE,
        };
    }
    match lathe::platform::process::sandbox_exec(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("lathe sandbox-exec: {err}");
            // What a shell answers when it cannot run a command.
            ExitCode::from(127)
        }
    }
}

/// `sandbox-exec` is dispatched before anything else in `main`.
fn unreachable_sandbox_exec() -> anyhow::Result<ExitCode> {
    anyhow::bail!("sandbox-exec is handled before the other commands")
}

/// Tells the redaction the config's secrets (for the log and the trace),
/// and opens the `--trace` file (or `LATHE_TRACE`) when one is named.
fn start_trace(path: Option<&std::path::Path>, config: Option<&Config>) -> anyhow::Result<()> {
    lathe::redact::set_secrets(config.map(lathe::redact::secrets_of).unwrap_or_default());
    let Some(path) = path.filter(|path| !path.as_os_str().is_empty()) else { return Ok(()) };
    lathe::trace::install(path).with_context(|| format!("cannot open the trace file {}", path.display()))?;
    Ok(())
}

/// The log filter when serving ACP and neither `--log-level` nor `RUST_LOG` says otherwise.
const SERVE_LOG_FILTER: &str = "warn";

/// The log filter of `exec` and `chat` by default: lathe's own news, the
/// libraries' warnings.
const TERMINAL_LOG_FILTER: &str = "warn,lathe=info";

fn init_logging(level: Option<&str>, file: Option<&std::path::Path>, default: &str) -> anyhow::Result<()> {
    use tracing_subscriber::EnvFilter;
    let filter = match level {
        Some(level) => {
            EnvFilter::try_new(level).with_context(|| format!("--log-level {level:?} is not a valid filter"))?
        }
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default)),
    };
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match file {
        Some(path) => {
            // Private like every other file lathe writes (logs can quote
            // prompts, paths and server messages).
            let file = lathe::platform::private::open_append(path)
                .with_context(|| format!("cannot open the log file {}", path.display()))?;
            builder.with_ansi(false).with_writer(lathe::redact::LogWriter::new(std::sync::Mutex::new(file))).init();
        }
        // Every line redacted (lathe::redact): a URL's password, a known secret.
        None => builder
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(lathe::redact::LogWriter::new(std::io::stderr))
            .init(),
    }
    Ok(())
}

/// What a person who started lathe by hand sees on stderr.
fn greet(config: &Config) {
    eprintln!(
        "lathe {} - a coding agent that speaks the Agent Client Protocol (ACP) on stdin/stdout.",
        env!("CARGO_PKG_VERSION")
    );
    eprintln!("config: {}", config.source);
    match &config.data_dir {
        Some(dir) => eprintln!("data:   sessions are saved under {}", dir.join("sessions").display()),
        None => eprintln!("data:   no data directory (set --data-dir or LATHE_DATA_DIR); sessions are not saved"),
    }
    // Model names come from a server found running here: shown escaped.
    let shown = |text: &str| lathe::present::text::shown(text, lathe::present::text::Lines::One).into_owned();
    match (&config.source, config.default_model()) {
        (ConfigSource::Unconfigured, _) | (_, None) => {
            eprintln!("model:  none configured; run `lathe setup` (or set OPENAI_API_KEY and OPENAI_MODEL)");
            for server in &config.local_servers {
                eprintln!("        found running here: {}", shown(server));
            }
        }
        (ConfigSource::Discovered { server, .. }, Some(model)) => {
            eprintln!(
                "model:  {} at {}, found running here: {server}",
                shown(&model.model),
                shown(&lathe::redact::url(&model.base_url))
            );
            eprintln!("        (no config file; `lathe setup` writes one)");
        }
        (ConfigSource::File(_) | ConfigSource::Environment, Some(model)) => {
            eprintln!(
                "model:  {} ({}) at {}",
                shown(&model.key),
                shown(&model.model),
                shown(&lathe::redact::url(&model.base_url))
            )
        }
    }
    eprintln!("check:  `lathe doctor` checks the config, the model endpoint and the data directory");
    eprintln!("lathe is meant to be started by an editor. For Zed, add to settings.json:");
    eprintln!("  \"agent_servers\": {{ \"lathe\": {{ \"type\": \"custom\", \"command\": \"lathe\", \"args\": [] }} }}");
    eprintln!("Now serving ACP on this terminal; type JSON-RPC lines, or press Ctrl-D to quit.");
}

async fn shutdown_signal() {
    lathe::platform::console::shutdown().await;
}
