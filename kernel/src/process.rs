//! Running a validation command: the process provider (raw readback) and the capability that
//! turns its observation into a completion proposal. The kernel commits or refuses.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use loopx_core::model::EvidenceKind;
use loopx_core::traits::{
    Capability, EvidenceDraft, Observation, ObservationRequest, Provider, Rejection, TransitionProposal,
};
use loopx_core::{Error, Result, TodoId};

/// Runs commands: argv, never a shell; output is digested, not kept.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessProvider;

/// Output kept for the digest and the failure message, per stream.
const OUTPUT_CAP: usize = 1 << 20;

fn drain(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut buf = [0u8; 8192];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            if out.len() < OUTPUT_CAP {
                out.extend_from_slice(&buf[..n.min(OUTPUT_CAP - out.len())]);
            }
        }
        out
    })
}

impl ProcessProvider {
    /// Runs `argv` in `cwd`, killing it after `timeout`.
    pub fn run(&self, argv: &[String], cwd: &std::path::Path, timeout: Duration) -> Result<Observation> {
        let (program, args) =
            argv.split_first().ok_or_else(|| Error::usage("the validation command is empty"))?;
        let start = Instant::now();
        let mut child = Command::new(program)
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                Error::refused(format!("cannot run the validation command `{}`: {e}", argv.join(" ")))
                    .with_hint("check that the program exists and is on PATH")
            })?;
        let out = child.stdout.take().map(drain);
        let err = child.stderr.take().map(drain);
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if start.elapsed() >= timeout => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => {
                    return Err(Error::internal(format!("cannot wait for the validation command: {e}")));
                }
            }
        };
        let mut hasher = Sha256::new();
        for h in [out, err].into_iter().flatten() {
            hasher.update(h.join().unwrap_or_default());
        }
        let digest = hasher.finalize();
        Ok(Observation::CommandExited {
            argv: argv.to_vec(),
            exit_code: status.and_then(|s| s.code()),
            output_digest: format!(
                "sha256:{}",
                digest.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ),
            duration_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
        })
    }
}

#[async_trait]
impl Provider for ProcessProvider {
    fn name(&self) -> &'static str {
        "process"
    }

    async fn observe(&self, request: &ObservationRequest) -> Result<Observation> {
        match request {
            ObservationRequest::RunCommand { argv, cwd, timeout_ms } => {
                self.run(argv, cwd, Duration::from_millis(*timeout_ms))
            }
            other => Err(Error::usage(format!("the process provider cannot serve {other:?}"))),
        }
    }
}

/// "The validation command exited 0": the only observation that completes a todo that has one.
#[derive(Debug, Default, Clone, Copy)]
pub struct CommandPassed;

/// The evidence a command observation gives, passing or not.
pub fn command_evidence(observation: &Observation) -> Option<EvidenceDraft> {
    let Observation::CommandExited { argv, exit_code, output_digest, duration_ms } = observation else {
        return None;
    };
    Some(EvidenceDraft {
        kind: EvidenceKind::Command,
        summary: match exit_code {
            Some(0) => format!("validation `{}` passed in {duration_ms} ms", argv.join(" ")),
            Some(c) => format!("validation `{}` failed with exit code {c}", argv.join(" ")),
            None => format!("validation `{}` was killed after {duration_ms} ms", argv.join(" ")),
        },
        command: Some(argv.clone()),
        exit_code: *exit_code,
        output_digest: Some(output_digest.clone()),
    })
}

impl Capability for CommandPassed {
    fn name(&self) -> &'static str {
        "validation-command"
    }

    fn validate(
        &self,
        todo: TodoId,
        observation: &Observation,
    ) -> std::result::Result<TransitionProposal, Rejection> {
        let evidence = command_evidence(observation)
            .ok_or_else(|| Rejection { reason: "not a command observation".to_owned() })?;
        match observation {
            Observation::CommandExited { exit_code: Some(0), .. } => {
                Ok(TransitionProposal::CompleteTodo { todo, evidence })
            }
            _ => Err(Rejection { reason: evidence.summary }),
        }
    }
}
