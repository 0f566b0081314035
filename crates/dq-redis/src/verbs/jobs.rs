//! One job, or a listing of jobs: get, list_ready and list_scheduled
//! (`lua/get.lua`), cancel (`lua/cancel.lua`), reschedule
//! (`lua/reschedule.lua`), list_jobs (`lua/list_jobs.lua`: a page of an
//! export).

use dq_core::store::StoreResult;
use dq_core::*;
use redis::Value;

use super::n;
use crate::RedisStore;
use crate::decode::{
    array, bytes, int, opt_time, protocol, state_of, status, stored_trace, string,
};

pub(crate) async fn get(
    store: &RedisStore,
    topic: &Topic,
    id: &JobId,
) -> StoreResult<Option<JobInfo>> {
    let v = store
        .run(&store.scripts.get, topic, &[b"i", id.as_str().as_bytes()])
        .await?;
    Ok(decode_jobs(v)?.pop())
}

pub(crate) async fn cancel(
    store: &RedisStore,
    topic: &Topic,
    id: &JobId,
    now_ms: u64,
) -> StoreResult<Option<JobState>> {
    let v = store
        .run(
            &store.scripts.cancel,
            topic,
            &[id.as_str().as_bytes(), &store.now_arg(now_ms)],
        )
        .await?;
    match v {
        Value::Nil => Ok(None),
        other => Ok(Some(state_of(&string(&other)?)?)),
    }
}

pub(crate) async fn reschedule(
    store: &RedisStore,
    topic: &Topic,
    id: &JobId,
    due_at_ms: u64,
    kick: bool,
    now_ms: u64,
) -> StoreResult<()> {
    let v = store
        .run(
            &store.scripts.reschedule,
            topic,
            &[
                id.as_str().as_bytes(),
                &n(due_at_ms),
                &store.now_arg(now_ms),
                if kick { b"1" } else { b"0" },
            ],
        )
        .await?;
    status(&v).map(|_| ())
}

/// Ready (`mode` `r`, in hand-out order) or scheduled (`u`, soonest
/// first) jobs, `limit` after the first `offset` (get.lua).
pub(crate) async fn list_waiting(
    store: &RedisStore,
    topic: &Topic,
    mode: &[u8],
    offset: usize,
    limit: usize,
) -> StoreResult<Vec<JobInfo>> {
    let v = store
        .run(
            &store.scripts.get,
            topic,
            &[mode, &n(limit.max(1) as u64), &n(offset as u64)],
        )
        .await?;
    decode_jobs(v)
}

pub(crate) async fn list_jobs(
    store: &RedisStore,
    topic: &Topic,
    state: Option<JobState>,
    cursor: Option<&str>,
    limit: usize,
) -> StoreResult<JobPage> {
    let cursor = match cursor {
        None => "0".to_string(),
        Some(c) if !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()) && c != "0" => {
            c.to_string()
        }
        Some(_) => {
            return Err(StoreError::Invalid(InvalidInput::new(
                "invalid_cursor",
                "cursor is not one this store handed out: start again without one",
            )));
        }
    };
    let letter: &[u8] = match state {
        None => b"",
        Some(JobState::Scheduled) => b"s",
        Some(JobState::Ready) => b"y",
        Some(JobState::Reserved) => b"r",
        Some(JobState::Dead) => b"d",
    };
    let count = limit.clamp(1, dq_core::limits::MAX_BATCH) as u64;
    let v = store
        .run(
            &store.scripts.list_jobs,
            topic,
            &[cursor.as_bytes(), &n(count), letter],
        )
        .await?;
    let (jobs, cursor) = decode_page(v)?;
    Ok(JobPage { jobs, cursor })
}

/// Values per job in the `get` script's reply (common.lua's `job_info`).
const JOB_VALUES: usize = 23;

/// The `get` script's reply ([`JOB_VALUES`] per job) to [`JobInfo`]s.
pub(crate) fn decode_jobs(v: Value) -> StoreResult<Vec<JobInfo>> {
    let items = array(v)?;
    if !items.len().is_multiple_of(JOB_VALUES) {
        return Err(protocol("get reply length"));
    }
    items.chunks(JOB_VALUES).map(job_info).collect()
}

/// The [`JOB_VALUES`] values of one job in get's (and list_jobs's) reply.
fn job_info(c: &[Value]) -> StoreResult<JobInfo> {
    let opt = |v: &Value| -> StoreResult<Option<u64>> { Ok(opt_time(int(v)?)) };
    let id = JobId::new(string(&c[0])?).map_err(|_| protocol("bad id"))?;
    let kind = string(&c[6])?;
    Ok(JobInfo {
        id,
        state: state_of(&string(&c[1])?)?,
        due_at_ms: int(&c[2])? as u64,
        priority: int(&c[3])? as u32,
        attempts: int(&c[4])? as u32,
        created_at_ms: int(&c[5])? as u64,
        body: Body::from_stored(bytes(c[7].clone())?, kind == "j"),
        max_attempts: int(&c[8])? as u32,
        lease_ms: int(&c[9])? as u64,
        lease_deadline_ms: opt(&c[10])?,
        died_at_ms: opt(&c[11])?,
        last_error: if int(&c[12])? == 1 {
            Some(String::from_utf8_lossy(&bytes(c[13].clone())?).into_owned())
        } else {
            None
        },
        expires_at_ms: None,
        counts: JobCounts {
            reserves: int(&c[20])? as u32,
            timeouts: int(&c[14])? as u32,
            releases: int(&c[15])? as u32,
            buries: int(&c[16])? as u32,
            kicks: int(&c[17])? as u32,
        },
        key: match string(&c[18])? {
            k if k.is_empty() => None,
            k => Some(JobKey::new(k).map_err(|_| protocol("bad key"))?),
        },
        errors: dq_core::errors_from_json(Some(&String::from_utf8_lossy(&bytes(c[19].clone())?))),
        put_delay_ms: opt(&c[21])?,
        trace: stored_trace(&bytes(c[22].clone())?),
    })
}

/// list_jobs's `{cursor, (JOB_VALUES + 4 per job)*}`: the jobs and the
/// next HSCAN cursor (`None` when the scan is complete).
fn decode_page(v: Value) -> StoreResult<(Vec<ListedJob>, Option<String>)> {
    const N: usize = JOB_VALUES + 4;
    let mut items = array(v)?;
    if items.is_empty() || !(items.len() - 1).is_multiple_of(N) {
        return Err(protocol("list_jobs reply length"));
    }
    let cursor = string(&items[0])?;
    let rest = items.split_off(1);
    let jobs = rest
        .chunks(N)
        .map(|c| {
            let retry = string(&c[JOB_VALUES + 2])?;
            Ok(ListedJob {
                info: job_info(&c[..JOB_VALUES])?,
                max_attempts: opt_time(int(&c[JOB_VALUES])?).map(|n| n as u32),
                lease_ms: opt_time(int(&c[JOB_VALUES + 1])?),
                retry: (!retry.is_empty())
                    .then(|| RetryPolicy::decode(&retry))
                    .flatten(),
                dedup_ms: opt_time(int(&c[JOB_VALUES + 3])?),
            })
        })
        .collect::<StoreResult<_>>()?;
    Ok((jobs, (cursor != "0").then_some(cursor)))
}
