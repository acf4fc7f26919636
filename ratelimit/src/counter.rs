//! Fixed one-minute windows in Redis. One script adds and sets the expiry, so that
//! replicas racing on a key never leave a counter without one.

use redis::aio::ConnectionManager;

/// Seconds a window's counter outlives its minute: late reconciliations still land.
const TTL_S: u64 = 180;

const ADD: &str = r"
local value = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[2], 'NX')
return value
";

#[derive(Clone)]
pub struct Counter {
    connection: ConnectionManager,
    script: redis::Script,
}

impl Counter {
    /// Connects (and reconnects on its own after Redis restarts).
    pub async fn connect(url: &str) -> Result<Self, redis::RedisError> {
        let client = redis::Client::open(url)?;
        let connection = ConnectionManager::new(client).await?;
        Ok(Self { connection, script: redis::Script::new(ADD) })
    }

    /// Adds `delta` (negative to give back) and returns the new count.
    pub async fn add(&self, key: &str, delta: i64) -> Result<i64, redis::RedisError> {
        let mut connection = self.connection.clone();
        self.script.key(key).arg(delta).arg(TTL_S).invoke_async(&mut connection).await
    }
}

/// The current minute's window and the seconds until it ends.
pub fn window(now_unix_s: u64) -> (u64, u32) {
    (now_unix_s / 60, u32::try_from(60 - now_unix_s % 60).unwrap_or(60))
}
