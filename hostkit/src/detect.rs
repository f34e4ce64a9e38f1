//! Finding a host on this machine: the first of its programs on the search path the command
//! line hands over, and the version that program reports (`--version`, first line).

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

use loopx_core::host::{Detection, HostProtocol};

/// Looks for `host`'s programs in `search_path` (a `PATH` value; relative entries are taken
/// from `cwd`) and asks the first one found its version.
pub fn detect(host: &dyn HostProtocol, search_path: Option<&OsStr>, cwd: &Path) -> Detection {
    let path = host.binaries().iter().find_map(|b| which::which_in(b, search_path, cwd).ok());
    let version = path.as_ref().and_then(|p| {
        let out = Command::new(p).arg("--version").output().ok()?;
        let first = String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("").trim().to_owned();
        out.status.success().then_some(first)
    });
    Detection { path, version }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loopx_core::Result;
    use loopx_core::host::{HookEventName, HookPoint, HookReply, HookSample, HostAnswer, HostEvent};

    #[derive(Debug)]
    struct Fake;

    impl HostProtocol for Fake {
        fn host(&self) -> &'static str {
            "fake"
        }
        fn binaries(&self) -> &'static [&'static str] {
            &["fake-agent", "fake"]
        }
        fn hook_events(&self) -> Vec<HookEventName> {
            Vec::new()
        }
        fn decode(&self, _: HookPoint, _: &[u8]) -> Result<HostEvent> {
            Err(loopx_core::Error::usage("no hooks"))
        }
        fn encode(&self, _: HookPoint, _: &HookReply) -> HostAnswer {
            HostAnswer::default()
        }
        fn fail_open(&self, _: Option<HookPoint>, message: &str) -> HostAnswer {
            HostAnswer::warning(message)
        }
        fn tool_name(&self, tool: &str) -> String {
            tool.to_owned()
        }
        fn samples(&self) -> Vec<HookSample> {
            Vec::new()
        }
        fn check_answer(&self, _: Option<HookPoint>, _: &HostAnswer) -> Result<()> {
            Ok(())
        }
    }

    #[cfg(unix)]
    #[test]
    fn the_first_program_on_the_path_is_found_and_asked_its_version() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let empty = tempfile::tempdir().unwrap();
        let fake = dir.path().join("fake");
        std::fs::write(&fake, "#!/bin/sh\nprintf '1.2.3 (Fake)\\nmore\\n'\n").unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths([empty.path(), dir.path()]).unwrap();

        let d = detect(&Fake, Some(&path), dir.path());
        assert_eq!(d.path.as_deref(), Some(fake.as_path()), "the second name, where the first is missing");
        assert_eq!(d.version.as_deref(), Some("1.2.3 (Fake)"));

        let none = detect(&Fake, Some(empty.path().as_os_str()), dir.path());
        assert_eq!((none.path, none.version), (None, None));
    }
}
