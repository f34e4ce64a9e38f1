//! Strict mode: the person's key. `loopx person init` makes an Ed25519 key whose secret half is
//! kept encrypted with a passphrase (Argon2id, then XChaCha20-Poly1305) in the person's own
//! configuration, never in a project; the goal records the public half, and from then on the
//! kernel commits a person's decision only signed by it. The signed message binds the goal, the
//! event and its place in the log (its sequence number and the hash of the line before), so a
//! signature is good for one decision, once.

use std::path::Path;

use argon2::{Algorithm, Argon2, Params, Version};
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};

use loopx_core::event::Event;
use loopx_core::kernel::Signer;
use loopx_core::{Error, GoalId, Result};

/// The version of the key file this build reads and writes.
pub(crate) const KEY_SCHEMA_VERSION: u32 = 1;

/// Argon2id's cost: 19 MiB, two passes (OWASP's minimum for Argon2id).
const KDF_MEMORY_KIB: u32 = 19 * 1024;
const KDF_PASSES: u32 = 2;

/// The shortest passphrase accepted.
pub(crate) const MIN_PASSPHRASE: usize = 8;

/// `person.json`: the public key, and the secret key sealed with the passphrase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyFile {
    pub schema_version: u32,
    /// Hex.
    pub public_key: String,
    pub(crate) kdf: Kdf,
    /// XChaCha20-Poly1305's nonce (24 bytes) and the sealed secret key, hex.
    pub(crate) nonce: String,
    pub sealed: String,
}

/// How the passphrase becomes the sealing key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Kdf {
    /// `argon2id`.
    pub(crate) alg: String,
    pub(crate) memory_kib: u32,
    pub passes: u32,
    /// Hex, 16 bytes.
    pub(crate) salt: String,
}

/// The person's key, unsealed for one command.
pub struct PersonKey(SigningKey);

impl std::fmt::Debug for PersonKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PersonKey({})", self.public_key())
    }
}

impl Signer for PersonKey {
    fn public_key(&self) -> String {
        hex(self.0.verifying_key().as_bytes())
    }
    fn sign(&self, message: &[u8]) -> String {
        hex(&self.0.sign(message).to_bytes())
    }
}

fn random<const N: usize>() -> Result<[u8; N]> {
    let mut b = [0u8; N];
    getrandom::getrandom(&mut b)
        .map_err(|e| Error::internal(format!("no randomness from the system: {e}")))?;
    Ok(b)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex<const N: usize>(what: &str, s: &str) -> Result<[u8; N]> {
    let bad = || Error::integrity(format!("{what} is not {N} bytes of hex"));
    if s.len() != 2 * N || !s.is_ascii() {
        return Err(bad());
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(out)
}

fn sealing_key(passphrase: &str, kdf: &Kdf) -> Result<[u8; 32]> {
    if kdf.alg != "argon2id" {
        return Err(Error::integrity(format!("the key file's kdf is {:?}, not argon2id", kdf.alg)));
    }
    let salt: [u8; 16] = unhex("the key file's salt", &kdf.salt)?;
    let params = Params::new(kdf.memory_kib, kdf.passes, 1, Some(32))
        .map_err(|e| Error::integrity(format!("the key file's kdf parameters: {e}")))?;
    let mut key = [0u8; 32];
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
        .hash_password_into(passphrase.as_bytes(), &salt, &mut key)
        .map_err(|e| Error::internal(format!("cannot derive the sealing key: {e}")))?;
    Ok(key)
}

/// A new key sealed with `passphrase`: the file to keep, and the key itself.
pub fn create(passphrase: &str) -> Result<(KeyFile, PersonKey)> {
    if passphrase.chars().count() < MIN_PASSPHRASE {
        return Err(Error::usage(format!("the passphrase is shorter than {MIN_PASSPHRASE} characters"))
            .with_hint("choose a longer one: it is all that stands between an agent and your approvals"));
    }
    let secret: [u8; 32] = random()?;
    let key = SigningKey::from_bytes(&secret);
    let kdf = Kdf {
        alg: "argon2id".to_owned(),
        memory_kib: KDF_MEMORY_KIB,
        passes: KDF_PASSES,
        salt: hex(&random::<16>()?),
    };
    let nonce: [u8; 24] = random()?;
    let sealed = XChaCha20Poly1305::new((&sealing_key(passphrase, &kdf)?).into())
        .encrypt(XNonce::from_slice(&nonce), secret.as_slice())
        .map_err(|_| Error::internal("cannot seal the key"))?;
    let person = PersonKey(key);
    let file = KeyFile {
        schema_version: KEY_SCHEMA_VERSION,
        public_key: person.public_key(),
        kdf,
        nonce: hex(&nonce),
        sealed: hex(&sealed),
    };
    Ok((file, person))
}

/// The key `file` seals, with `passphrase`; a wrong passphrase is refused.
pub fn unlock(file: &KeyFile, passphrase: &str) -> Result<PersonKey> {
    let nonce: [u8; 24] = unhex("the key file's nonce", &file.nonce)?;
    let sealed: [u8; 48] = unhex("the key file's sealed key", &file.sealed)?;
    let secret = XChaCha20Poly1305::new((&sealing_key(passphrase, &file.kdf)?).into())
        .decrypt(XNonce::from_slice(&nonce), sealed.as_slice())
        .map_err(|_| {
            Error::refused("wrong passphrase for the person key").with_hint("try again; nothing was changed")
        })?;
    let secret: [u8; 32] =
        secret.try_into().map_err(|_| Error::integrity("the key file's sealed key is not 32 bytes"))?;
    let key = PersonKey(SigningKey::from_bytes(&secret));
    if key.public_key() != file.public_key {
        return Err(Error::integrity("the key file's public key is not its secret key's"));
    }
    Ok(key)
}

/// The key file at `path`, if there is one; a damaged one is refused.
pub fn read(path: &Path) -> Result<Option<KeyFile>> {
    let hint = "restore it from your backup; without it, a goal in strict mode takes no decision of yours";
    crate::fs::read_config(path, "loopx's person key", hint, KEY_SCHEMA_VERSION)
}

/// Writes the key file at `path`, readable by its owner only; never over an existing one.
pub fn write(path: &Path, file: &KeyFile) -> Result<()> {
    if path.exists() {
        return Err(Error::refused(format!("{} exists already", path.display()))
            .with_hint("loopx person init uses the key there; move it away to make a new one"));
    }
    if let Some(dir) = path.parent() {
        crate::fs::create_dir_all(dir)?;
    }
    let mut bytes = serde_json::to_vec_pretty(file)
        .map_err(|e| Error::internal(format!("cannot encode the key: {e}")))?;
    bytes.push(b'\n');
    crate::fs::atomic_write(path, &bytes)?;
    #[cfg(unix)]
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(|e| Error::io("protect", path, &e))?;
    Ok(())
}

/// What a person signs for one decision: the goal, the event's place in the log (its sequence
/// number and the hash of the line before it) and the event itself.
pub fn message(goal: &GoalId, seq: u64, prev: &str, event: &Event) -> Result<Vec<u8>> {
    let event =
        serde_json::to_string(event).map_err(|e| Error::internal(format!("cannot encode event: {e}")))?;
    Ok(format!("loopx person decision v1\ngoal {goal}\nseq {seq}\nprev {prev}\n{event}").into_bytes())
}

/// Whether `signature` (hex) is `public_key`'s (hex) over `message`.
pub fn verify(public_key: &str, message: &[u8], signature: &str) -> bool {
    let (Ok(key), Ok(sig)) = (unhex::<32>("", public_key), unhex::<64>("", signature)) else { return false };
    let Ok(key) = VerifyingKey::from_bytes(&key) else { return false };
    key.verify_strict(message, &Signature::from_bytes(&sig)).is_ok()
}

/// Whether `public_key` is an Ed25519 public key in hex.
pub(crate) fn is_public_key(public_key: &str) -> bool {
    unhex::<32>("", public_key).is_ok_and(|k| VerifyingKey::from_bytes(&k).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_seals_unseals_and_signs_one_message() {
        let (file, key) = create("correct horse battery").unwrap();
        // Sealed at OWASP's least cost for Argon2id: 19 MiB, two passes.
        assert_eq!((file.kdf.alg.as_str(), file.kdf.memory_kib, file.kdf.passes), ("argon2id", 19_456, 2));
        // Shown, the key is its public half alone.
        assert_eq!(format!("{key:?}"), format!("PersonKey({})", file.public_key));
        // Eight characters at the least.
        assert_eq!(MIN_PASSPHRASE, 8);
        assert!(create("eight ch").is_ok());
        assert_eq!(create("seven c").unwrap_err().kind, loopx_core::ErrorKind::Usage);
        assert!(unlock(&file, "wrong horse battery").is_err());
        let again = unlock(&file, "correct horse battery").unwrap();
        assert_eq!(again.public_key(), file.public_key);
        let goal = GoalId::new("main").unwrap();
        let m = message(&goal, 7, "abc", &Event::GoalResumed {}).unwrap();
        let sig = key.sign(&m);
        assert!(verify(&file.public_key, &m, &sig));
        for other in [
            message(&goal, 8, "abc", &Event::GoalResumed {}).unwrap(),
            message(&goal, 7, "abd", &Event::GoalResumed {}).unwrap(),
            message(&GoalId::new("other").unwrap(), 7, "abc", &Event::GoalResumed {}).unwrap(),
            message(&goal, 7, "abc", &Event::GoalStopped { reason: None, now: false }).unwrap(),
        ] {
            assert!(!verify(&file.public_key, &other, &sig), "a signature is good for one decision");
        }
        let (_, stranger) = create("another passphrase").unwrap();
        assert!(!verify(&stranger.public_key(), &m, &sig));
        assert!(!verify("zz", &m, &sig) && !verify(&file.public_key, &m, "00"));
    }

    /// The key file is written once, for its owner alone, and read back as written.
    #[test]
    fn a_key_file_is_written_once_for_its_owner_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys").join("person.json");
        assert_eq!(read(&path).unwrap(), None);
        let (file, _) = create("correct horse battery").unwrap();
        write(&path, &file).unwrap();
        assert_eq!(read(&path).unwrap(), Some(file.clone()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let (other, _) = create("another passphrase").unwrap();
        assert_eq!(write(&path, &other).unwrap_err().kind, loopx_core::ErrorKind::Refused);
        assert_eq!(read(&path).unwrap(), Some(file.clone()), "the first key stays");
        assert!(is_public_key(&file.public_key));
        assert!(!is_public_key("zz") && !is_public_key(&file.public_key[2..]));
    }
}
