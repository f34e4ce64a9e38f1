//! The person's key on this machine (strict mode): `loopx person init` makes an Ed25519 key
//! whose secret half is kept encrypted with a passphrase (Argon2id, then XChaCha20-Poly1305)
//! in the person's own configuration directory, never in a project. The key and the signature
//! check are the kernel's ([`loopx_kernel::person`]); the file, its sealing and which goal it
//! may sign for are here.

use std::path::Path;

use argon2::{Algorithm, Argon2, Params, Version};
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use serde::{Deserialize, Serialize};

use loopx_core::event::key_short;
use loopx_core::kernel::Signer as _;
use loopx_core::{Error, Result};
use loopx_kernel::fs as kfs;
use loopx_kernel::person::{PersonKey, hex, random, unhex};

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
    let person = PersonKey::generate()?;
    let secret = person.secret();
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
    let key = PersonKey::from_secret(&secret);
    if key.public_key() != file.public_key {
        return Err(Error::integrity("the key file's public key is not its secret key's"));
    }
    Ok(key)
}

/// The key file at `path`, if there is one; a damaged one is refused.
pub fn read(path: &Path) -> Result<Option<KeyFile>> {
    let hint = "restore it from your backup; without it, a goal in strict mode takes no decision of yours";
    kfs::read_config(path, "loopx's person key", hint, KEY_SCHEMA_VERSION)
}

/// Writes the key file at `path`, readable by its owner only; never over an existing one.
pub fn write(path: &Path, file: &KeyFile) -> Result<()> {
    if path.exists() {
        return Err(Error::refused(format!("{} exists already", path.display()))
            .with_hint("loopx person init uses the key there; move it away to make a new one"));
    }
    if let Some(dir) = path.parent() {
        kfs::create_dir_all(dir)?;
    }
    let mut bytes = serde_json::to_vec_pretty(file)
        .map_err(|e| Error::internal(format!("cannot encode the key: {e}")))?;
    bytes.push(b'\n');
    kfs::atomic_write(path, &bytes)?;
    #[cfg(unix)]
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(|e| Error::io("protect", path, &e))?;
    Ok(())
}

/// The key file at `path`, checked to be the one a goal in strict mode under `goal_key` takes
/// decisions from: refused when this machine has none, or another.
pub fn for_goal(path: &Path, goal_key: &str) -> Result<KeyFile> {
    let file = read(path)?.ok_or_else(|| {
        Error::refused(format!(
            "this goal is in strict mode (person key {}), and this machine has no person key ({})",
            key_short(goal_key),
            path.display()
        ))
        .with_hint("decide where your key is, or restore the key file from your backup")
    })?;
    if file.public_key != goal_key {
        return Err(Error::refused(format!(
            "the person key here ({}) is not the one this goal takes decisions from ({})",
            key_short(&file.public_key),
            key_short(goal_key)
        ))
        .with_hint("decide where the goal's key is"));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_key_seals_and_unseals_with_its_passphrase_only() {
        let (file, key) = create("correct horse battery").unwrap();
        // Sealed at OWASP's least cost for Argon2id: 19 MiB, two passes.
        assert_eq!((file.kdf.alg.as_str(), file.kdf.memory_kib, file.kdf.passes), ("argon2id", 19_456, 2));
        assert_eq!(key.public_key(), file.public_key);
        // Eight characters at the least.
        assert_eq!(MIN_PASSPHRASE, 8);
        assert!(create("eight ch").is_ok());
        assert_eq!(create("seven c").unwrap_err().kind, loopx_core::ErrorKind::Usage);
        assert!(unlock(&file, "wrong horse battery").is_err());
        let again = unlock(&file, "correct horse battery").unwrap();
        assert_eq!(again.public_key(), file.public_key);
    }

    /// The key file is written once, for its owner alone, and read back as written; it signs
    /// only for the goal whose key it holds.
    #[test]
    fn a_key_file_is_written_once_for_its_owner_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys").join("person.json");
        assert_eq!(read(&path).unwrap(), None);
        let (file, _) = create("correct horse battery").unwrap();
        assert!(for_goal(&path, &file.public_key).unwrap_err().message.contains("has no person key"));
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
        assert_eq!(for_goal(&path, &file.public_key).unwrap(), file);
        assert!(for_goal(&path, &other.public_key).unwrap_err().message.contains("is not the one"));
    }
}
