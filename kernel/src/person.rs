//! Strict mode's signatures: a goal records the public half of its person's Ed25519 key, and
//! from then on the kernel commits a person's decision only signed by it. The signed message
//! binds the goal, the event and its place in the log (its sequence number and the hash of the
//! line before), so a signature is good for one decision, once. Keeping the key (sealed with a
//! passphrase, in the person's own configuration, never in a project) is the person's
//! machine's business; here is the key itself, what is signed, and the check.

use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};

use loopx_core::event::Event;
use loopx_core::kernel::Signer;
use loopx_core::{Error, GoalId, Result};

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

impl PersonKey {
    /// A new key, from the system's randomness.
    pub fn generate() -> Result<Self> {
        Ok(Self::from_secret(&random()?))
    }

    /// The key whose secret half is `secret`.
    pub fn from_secret(secret: &[u8; 32]) -> Self {
        Self(SigningKey::from_bytes(secret))
    }

    /// The secret half, for sealing it in the person's key file.
    pub fn secret(&self) -> [u8; 32] {
        self.0.to_bytes()
    }
}

/// `N` bytes from the system's randomness.
pub fn random<const N: usize>() -> Result<[u8; N]> {
    let mut b = [0u8; N];
    getrandom::getrandom(&mut b)
        .map_err(|e| Error::internal(format!("no randomness from the system: {e}")))?;
    Ok(b)
}

/// `b` in lower-case hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `N` bytes from hex; anything else is an integrity error naming `what`.
pub fn unhex<const N: usize>(what: &str, s: &str) -> Result<[u8; N]> {
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
    fn a_key_signs_one_message() {
        let key = PersonKey::generate().unwrap();
        let public = key.public_key();
        // Shown, the key is its public half alone.
        assert_eq!(format!("{key:?}"), format!("PersonKey({public})"));
        assert_eq!(PersonKey::from_secret(&key.secret()).public_key(), public);
        let goal = GoalId::new("main").unwrap();
        let m = message(&goal, 7, "abc", &Event::GoalResumed {}).unwrap();
        let sig = key.sign(&m);
        assert!(verify(&public, &m, &sig));
        for other in [
            message(&goal, 8, "abc", &Event::GoalResumed {}).unwrap(),
            message(&goal, 7, "abd", &Event::GoalResumed {}).unwrap(),
            message(&GoalId::new("other").unwrap(), 7, "abc", &Event::GoalResumed {}).unwrap(),
            message(&goal, 7, "abc", &Event::GoalStopped { reason: None, now: false }).unwrap(),
        ] {
            assert!(!verify(&public, &other, &sig), "a signature is good for one decision");
        }
        let stranger = PersonKey::generate().unwrap();
        assert!(!verify(&stranger.public_key(), &m, &sig));
        assert!(!verify("zz", &m, &sig) && !verify(&public, &m, "00"));
        assert!(is_public_key(&public));
        assert!(!is_public_key("zz") && !is_public_key(&public[2..]));
    }
}
