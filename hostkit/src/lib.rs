//! loopx-hostkit: the host platform, what every host's wiring runs on, the same for each:
//!
//! - [`install`]: applies an adapter's install spec to the host's files and takes it away
//!   again (a manifest per install, the user's bytes kept);
//! - [`hook`]: the hook driver, one host-neutral answer to every host's hooks, asking the
//!   kernel through its command surface;
//! - [`shell`]: the tool gate's reading of a shell command line;
//! - [`detect`]: finding a host's program on this machine and the version it reports;
//! - [`drive`] and [`child`]: `loopx drive`, loopx's own outer loop, which runs any agent CLI
//!   as a child, one turn at a time, asking the kernel before each turn and settling each one
//!   through it;
//! - [`mcp`]: `loopx mcp`, the stdio MCP server exposing the kernel's commands as tools to any
//!   host, answering on the output it is handed;
//! - [`identity`]: who runs a `loopx` command, a person or an agent in a host session or a
//!   driven turn, from the environment's marks and the process ancestry;
//! - [`next`]: the kernel's typed next steps spelled as command lines and as MCP tool calls,
//!   and an error's words for whoever reads them.
//!
//! It never writes a goal's state (the kernel does, through its commands; the turn's output
//! log is the kernel's too, [`loopx_kernel::turn_log`]), writes a file only through the
//! kernel's durable writes ([`loopx_kernel::fs`]: a host's files and install manifests), and
//! never reads the process environment or prints: the command line hands it what it needs (the
//! store opener, the host catalog, the registered adapters, an environment reader, the stdout
//! the MCP server answers on) and shows what it reports.

pub mod child;
pub mod detect;
pub mod drive;
pub mod hook;
pub mod identity;
pub mod install;
pub mod mcp;
pub mod next;
pub mod pick;
pub mod shell;
