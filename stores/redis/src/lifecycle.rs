//! Deleting streams and groups on Redis, and what a node keeps of them
//! (`docs/operations.md#deleting-streams-and-groups`,
//! `rheo_core::backend::catalog`).
//!
//! A delete is one guarded script (`cas.lua`): guarded on the stream's
//! stored value (and its set of groups, or the group's settings) as just
//! read, it removes the stream from the streams hash (or the group from
//! its stream's groups hash), `UNLINK`s every key of it ([`Keys::of_stream`],
//! [`Keys::of_group`]; a big one is freed in the background), counts up the
//! catalog generation and publishes a wake-up. Other clients see the stream
//! or group there with all its keys, or gone with all of them: nothing is
//! left for one created again under the name to find.
//!
//! Another node may keep the deleted stream or group until it next reads
//! the catalog generation ([`CHECK_EVERY`](rheo_core::backend::catalog::CHECK_EVERY)
//! at most): its writes are guarded on what it keeps, and fail; its reads
//! check it in a round trip they make anyway ([`RedisBackend::group_now`],
//! the fetch's candidates, [`RedisBackend::stream_now`]). Either way the
//! call answers not found and the node forgets what it kept.
//!
//! [`Keys::of_stream`]: super::Keys::of_stream
//! [`Keys::of_group`]: super::Keys::of_group

use std::time::Duration;

use super::claims::value;
use super::groups::{decode_settings, same_group};
use super::{
    Applied, Bounds, Cas, MAX_ATTEMPTS, Phase, RedisBackend, Settings, StreamFacts, map_error,
};
use rheo_core::backend::catalog::{Catalog, Generation};
use rheo_core::backend::{DeleteGroup, DeleteStream, Error, Result};
use rheo_core::model::{GroupName, StreamName};

impl RedisBackend {
    /// Reads the catalog generation at most every `every` (zero: before
    /// every call that uses what is kept) instead of every
    /// [`CHECK_EVERY`](rheo_core::backend::catalog::CHECK_EVERY); for tests
    /// of several nodes that must see each other's deletes at once. Call
    /// it before the backend is used.
    pub fn check_catalog_every(mut self, every: Duration) -> Self {
        self.catalog = std::sync::Arc::new(Catalog::shared_every(every));
        self
    }

    /// Trusts what is kept of streams and groups only after reading the
    /// catalog generation, when due; when it moved, forgets everything
    /// derived from them too.
    pub(super) async fn refresh_catalog(&self) -> Result<()> {
        let read = || async {
            let cmd = redis::cmd("GET").arg(self.keys.generation()).clone();
            let generation: Option<u64> = self.run(&cmd, Phase::Read).await?;
            Ok(generation.unwrap_or(0))
        };
        if self.catalog.refresh(read).await? {
            *self.positions.lock() = super::Positions::default();
            self.crowded.lock().clear();
            self.views.lock().clear();
            self.rotation.lock().clear();
            self.marks.lock().clear();
        }
        Ok(())
    }

    /// Forgets a stream, its groups and what was derived from them.
    pub(super) fn forget_stream(&self, s: &StreamName) {
        self.catalog.forget_stream(s);
        self.positions.lock().forget(s);
        self.crowded.lock().retain(|(stream, _)| stream != s);
        self.views.lock().retain(|(stream, ..), _| stream != s);
        self.rotation.lock().retain(|(stream, _), _| stream != s);
        self.marks.lock().remove(s);
    }

    /// Forgets a group and what was derived from it.
    pub(super) fn forget_group(&self, s: &StreamName, g: &GroupName) {
        self.catalog.forget_group(s, g);
        let group = (s.clone(), g.clone());
        self.crowded.lock().remove(&group);
        self.views
            .lock()
            .retain(|(stream, name, _), _| stream != s || name != g);
        self.rotation.lock().remove(&group);
    }

    /// Forgets a group's settings only (read again next time).
    pub(super) fn forget_settings(&self, s: &StreamName, g: &GroupName) {
        self.catalog.forget_group(s, g);
    }

    /// The stored values of a stream and one of its groups, in one round
    /// trip (`None`: absent).
    pub(super) async fn read_group(
        &self,
        s: &StreamName,
        g: &GroupName,
    ) -> Result<(Option<String>, Option<String>)> {
        let mut pipe = redis::pipe();
        pipe.cmd("HGET").arg(self.keys.streams()).arg(s.as_str());
        pipe.cmd("HGET").arg(self.keys.groups(s)).arg(g.as_str());
        pipe.query_async(&mut self.read_conn())
            .await
            .map_err(|e| map_error(e, Phase::Read))
    }

    /// Checks a group and its stream, as `settings` hold them, against
    /// their stored values as read (under generation `at`): a stream gone
    /// or of another identity (deleted, perhaps created again; a change of
    /// its retention keeps its identity) is not found, and so is
    /// a group gone or another of its name; either is forgotten then. The
    /// same group with other settings (a reset changed its ordering or
    /// flow) is kept as it is now, and returned.
    pub(super) fn judge(
        &self,
        (s, g): (&StreamName, &GroupName),
        settings: &Settings,
        (stream, group): (Option<String>, Option<String>),
        at: Generation,
    ) -> Result<Settings> {
        if stream.as_deref().map(super::stream_identity) != Some(&*settings.stream.identity) {
            self.forget_stream(s);
            return Err(Error::StreamNotFound(s.clone()));
        }
        match group {
            Some(raw) if *raw == *settings.raw => Ok(settings.clone()),
            Some(raw) if same_group(&raw, &settings.raw) => {
                let now = decode_settings(s, g, raw, settings.stream.clone())?;
                self.forget_settings(s, g);
                self.catalog.keep_group(s, g, now.clone(), at);
                Ok(now)
            }
            _ => {
                self.forget_group(s, g);
                Err(Error::GroupNotFound {
                    stream: s.clone(),
                    group: g.clone(),
                })
            }
        }
    }

    /// [`judge`](Self::judge) from a read made now.
    pub(super) async fn recheck(
        &self,
        s: &StreamName,
        g: &GroupName,
        settings: &Settings,
    ) -> Result<Settings> {
        let at = self.catalog.generation();
        let read = self.read_group(s, g).await?;
        self.judge((s, g), settings, read, at)
    }

    /// A group's settings, checked against the store in one round trip
    /// with, when `with_watermarks`, its stream's high watermarks and first
    /// sequences (else none): what a call that only reads the group starts
    /// with, so that it never answers for a group another node deleted.
    pub(super) async fn group_now(
        &self,
        s: &StreamName,
        g: &GroupName,
        with_watermarks: bool,
    ) -> Result<(Settings, Bounds)> {
        let settings = self.settings(s, g).await?;
        let at = self.catalog.generation();
        let mut pipe = redis::pipe();
        pipe.cmd("HGET").arg(self.keys.streams()).arg(s.as_str());
        pipe.cmd("HGET").arg(self.keys.groups(s)).arg(g.as_str());
        if with_watermarks {
            pipe.cmd("HGETALL").arg(self.keys.high_watermarks(s));
        }
        let replies: Vec<redis::Value> = pipe
            .query_async(&mut self.read_conn())
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let mut replies = replies.into_iter();
        let mut next = || (replies.next()).ok_or_else(|| super::corrupt("reply", "too short"));
        let read = (value(next()?)?, value(next()?)?);
        let settings = self.judge((s, g), &settings, read, at)?;
        let bounds = if with_watermarks {
            let raw = value(next()?)?;
            Bounds::of(&raw, settings.stream.partitions)
        } else {
            Bounds::default()
        };
        Ok((settings, bounds))
    }

    /// What a call on stream `s` (and group `g`) answered, unless it failed
    /// (`Error::Failed`: a read found something missing, or it lost too
    /// many races) because the stream or group is gone, or is not the one
    /// kept here: then not found.
    pub(super) async fn or_gone<T>(
        &self,
        s: &StreamName,
        g: Option<&GroupName>,
        answer: Result<T>,
    ) -> Result<T> {
        match answer {
            Err(failure @ Error::Failed(_)) => Err(self.failed_or_gone(s, g, failure).await),
            other => other,
        }
    }

    async fn failed_or_gone(&self, s: &StreamName, g: Option<&GroupName>, failure: Error) -> Error {
        let gone = match g {
            Some(g) => match self.catalog.group(s, g) {
                Some(settings) => self.recheck(s, g, &settings).await.err(),
                None => self
                    .read_group(s, g)
                    .await
                    .ok()
                    .and_then(|read| match read {
                        (None, _) => Some(Error::StreamNotFound(s.clone())),
                        (Some(_), None) => Some(Error::GroupNotFound {
                            stream: s.clone(),
                            group: g.clone(),
                        }),
                        _ => None,
                    }),
            },
            None => {
                let kept = self.catalog.stream(s);
                let cmd = redis::cmd("HGET")
                    .arg(self.keys.streams())
                    .arg(s.as_str())
                    .clone();
                match self.run::<Option<String>>(&cmd, Phase::Read).await {
                    Ok(None) => Some(Error::StreamNotFound(s.clone())),
                    Ok(Some(raw))
                        if kept.is_some_and(|k| *k.identity != *super::stream_identity(&raw)) =>
                    {
                        Some(Error::StreamNotFound(s.clone()))
                    }
                    _ => None,
                }
            }
        };
        if let Some(Error::StreamNotFound(_)) = gone {
            self.forget_stream(s);
        }
        gone.unwrap_or(failure)
    }

    /// A group's settings again, for another attempt of a call that
    /// started with `started`: a stream or group that is not the one it
    /// started on (deleted and created again meanwhile) is not found.
    pub(super) async fn settings_again(
        &self,
        s: &StreamName,
        g: &GroupName,
        started: &Settings,
    ) -> Result<Settings> {
        let now = self.settings(s, g).await?;
        if now.stream.identity != started.stream.identity {
            return Err(Error::StreamNotFound(s.clone()));
        }
        if !same_group(&now.raw, &started.raw) {
            return Err(Error::GroupNotFound {
                stream: s.clone(),
                group: g.clone(),
            });
        }
        Ok(now)
    }

    /// Deletes a stream with all its keys and its groups' in one script
    /// (see the module's documentation).
    pub(crate) async fn delete_stream(&self, req: DeleteStream) -> Result<()> {
        req.validate()?;
        let s = &req.stream;
        for _ in 0..MAX_ATTEMPTS {
            // Read afresh: what is kept may be stale.
            let mut pipe = redis::pipe();
            pipe.cmd("HGET").arg(self.keys.streams()).arg(s.as_str());
            pipe.cmd("HKEYS").arg(self.keys.groups(s));
            let (raw, groups): (Option<String>, Vec<String>) = pipe
                .query_async(&mut self.read_conn())
                .await
                .map_err(|e| map_error(e, Phase::Read))?;
            let Some(raw) = raw else {
                self.forget_stream(s);
                return Err(Error::StreamNotFound(s.clone()));
            };
            let facts = StreamFacts::decode(raw.clone())?;
            let (streams, groups_key) = (self.keys.streams(), self.keys.groups(s));
            let mut cas = Cas::default();
            cas.hget_is(&streams, s.as_str(), Some(&raw));
            // Exactly these groups: one created meanwhile sends it round.
            cas.hash_len_is(&groups_key, groups.len());
            for g in &groups {
                cas.hget_starts(&groups_key, g, "");
            }
            cas.write(&["HDEL", &streams, s.as_str()]);
            let mut keys = self.keys.of_stream(s, facts.partitions);
            for g in &groups {
                let g =
                    GroupName::parse(g.as_str()).map_err(|e| super::corrupt("group name", e))?;
                keys.extend(self.keys.of_group(s, &g, facts.partitions));
            }
            cas.unlink(&keys);
            cas.write(&["INCR", &self.keys.generation()]);
            self.publish_wake(&mut cas, s);
            if self.apply(&cas).await? == Applied::Yes {
                self.forget_stream(s);
                // Waiters find the stream gone.
                self.notifier.notify(s);
                return Ok(());
            }
            tokio::task::yield_now().await;
        }
        Err(Error::Failed(format!(
            "deleting stream {:?} lost {MAX_ATTEMPTS} races in a row; retry it",
            s.as_str()
        )))
    }

    /// Deletes a group with all its keys in one script (see the module's
    /// documentation); the stream and its other groups are untouched.
    pub(crate) async fn delete_group(&self, req: DeleteGroup) -> Result<()> {
        req.validate()?;
        let (s, g) = (&req.stream, &req.group);
        for _ in 0..MAX_ATTEMPTS {
            // Read afresh: what is kept may be stale.
            let (stream, group) = self.read_group(s, g).await?;
            let Some(stream) = stream else {
                self.forget_stream(s);
                return Err(Error::StreamNotFound(s.clone()));
            };
            let Some(group) = group else {
                self.forget_group(s, g);
                return Err(Error::GroupNotFound {
                    stream: s.clone(),
                    group: g.clone(),
                });
            };
            let facts = StreamFacts::decode(stream.clone())?;
            let (streams, groups) = (self.keys.streams(), self.keys.groups(s));
            let mut cas = Cas::default();
            cas.hget_is(&streams, s.as_str(), Some(&stream));
            cas.hget_is(&groups, g.as_str(), Some(&group));
            cas.write(&["HDEL", &groups, g.as_str()]);
            cas.unlink(&self.keys.of_group(s, g, facts.partitions));
            cas.write(&["INCR", &self.keys.generation()]);
            self.publish_wake(&mut cas, s);
            if self.apply(&cas).await? == Applied::Yes {
                self.forget_group(s, g);
                // Waiters find the group gone.
                self.notifier.notify(s);
                return Ok(());
            }
            tokio::task::yield_now().await;
        }
        Err(Error::Failed(format!(
            "deleting group {:?} of stream {:?} lost {MAX_ATTEMPTS} races in a row; retry it",
            g.as_str(),
            s.as_str()
        )))
    }
}
