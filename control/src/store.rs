//! Transactions on the [`DesiredState`]: [`Txn`] applies changes in place
//! and keeps an undo log, so a rejected transaction restores the state
//! exactly without copying 100,000 backends first.
//!
//! Rules checked here (the per-object ones live in [`crate::model`]):
//! - deletes of missing objects are NOT_FOUND;
//! - a frontend key belongs to one service: upserting it for another
//!   service while it exists is ALREADY_EXISTS;
//! - on the result ([`Txn::check`]): every frontend and backend the
//!   transaction touched has its service (NOT_FOUND), and every service it
//!   touched has at most [`MAX_BACKENDS_PER_SERVICE`] backends.
//!
//! Deleting a service deletes its frontends and backends; the transaction
//! records those deletes explicitly in [`Txn::committed`], so a watcher
//! replaying the changes needs no cascade rule.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};
use std::ops::Bound;

use crate::model::{
    Backend, BackendKey, Change, DesiredState, ErrorKind, Frontend, FrontendKey, Service, ValidationError,
    MAX_BACKENDS_PER_SERVICE,
};

/// One undo record: the key and its value before the change.
#[derive(Debug)]
enum Undo {
    Service(String, Option<Service>),
    Frontend(FrontendKey, Option<Frontend>),
    Backend(BackendKey, Option<Backend>),
}

/// What a transaction changed, for the compiler: which services must be
/// re-specified and which frontends and backends disappeared.
#[derive(Debug, Default, Clone)]
pub struct Delta {
    /// Services whose own fields or backends changed (including deleted
    /// and created ones). Unlisted services are taken from the previous
    /// snapshot as they are.
    pub services: BTreeSet<String>,
    /// Frontends deleted (they may have been re-created later in the same
    /// transaction; the compiler checks the result).
    pub deleted_frontends: Vec<FrontendKey>,
    /// Backends deleted (same remark).
    pub deleted_backends: Vec<BackendKey>,
    /// Whether any frontend was written or deleted.
    pub frontends_changed: bool,
}

/// An open transaction on a state; see the module doc. Dropping it without
/// [`commit`](Txn::commit) or [`rollback`](Txn::rollback) keeps the changes
/// (call one of the two).
#[derive(Debug)]
pub struct Txn<'s> {
    state: &'s mut DesiredState,
    undo: Vec<Undo>,
    /// The effective changes, in order; identical upserts are left out.
    pub committed: Vec<Change>,
    /// What the compiler needs to know.
    pub delta: Delta,
    touched_frontends: Vec<FrontendKey>,
    touched_backends: Vec<BackendKey>,
    /// Frontend keys by service: built by the first service delete (one
    /// pass over the frontends), kept current after it, so that deleting
    /// many services is not a pass over every frontend each.
    frontends_by_service: Option<HashMap<String, BTreeSet<FrontendKey>>>,
}

fn not_found(object: String, field: &str, message: impl Into<String>) -> ValidationError {
    ValidationError {
        kind: ErrorKind::NotFound,
        object,
        field: field.into(),
        message: message.into(),
    }
}

/// The backends of `service`, in key order.
pub fn backends_of<'a>(state: &'a DesiredState, service: &'a str) -> impl Iterator<Item = &'a Backend> + 'a {
    let start = BackendKey {
        service: service.to_string(),
        addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        port: 0,
    };
    state
        .backends
        .range((Bound::Included(start), Bound::Unbounded))
        .map(|(_, b)| b)
        .take_while(move |b| b.key.service == service)
}

impl<'s> Txn<'s> {
    /// Opens a transaction on `state`.
    pub fn new(state: &'s mut DesiredState) -> Txn<'s> {
        Txn {
            state,
            undo: Vec::new(),
            committed: Vec::new(),
            delta: Delta::default(),
            touched_frontends: Vec::new(),
            touched_backends: Vec::new(),
            frontends_by_service: None,
        }
    }

    /// The state with the changes so far.
    pub fn state(&self) -> &DesiredState {
        self.state
    }

    /// Whether the state is as it was: nothing changed, or every object
    /// changed was changed back (`[Delete B, Upsert B as it was]`), which
    /// is not a commit either.
    pub fn is_empty(&self) -> bool {
        let (mut services, mut frontends, mut backends) = (HashSet::new(), HashSet::new(), HashSet::new());
        // The first undo record of a key holds its value before the
        // transaction; later ones, values in between.
        self.undo.iter().all(|u| match u {
            Undo::Service(k, old) => !services.insert(k) || self.state.services.get(k) == old.as_ref(),
            Undo::Frontend(k, old) => !frontends.insert(k) || self.state.frontends.get(k) == old.as_ref(),
            Undo::Backend(k, old) => !backends.insert(k) || self.state.backends.get(k) == old.as_ref(),
        })
    }

    /// Applies one change (already validated on its own).
    pub fn change(&mut self, change: Change) -> Result<(), ValidationError> {
        match change {
            Change::UpsertService(s) => self.upsert_service(s),
            Change::UpsertFrontend(f) => self.upsert_frontend(f),
            Change::UpsertBackend(b) => self.upsert_backend(b),
            Change::DeleteService(n) => self.delete_service(&n),
            Change::DeleteFrontend(k) => self.delete_frontend(&k),
            Change::DeleteBackend(k) => self.delete_backend(&k),
        }
    }

    /// Creates or replaces a service.
    pub fn upsert_service(&mut self, s: Service) -> Result<(), ValidationError> {
        if self.state.services.get(&s.name) == Some(&s) {
            return Ok(());
        }
        let old = self.state.services.insert(s.name.clone(), s.clone());
        self.undo.push(Undo::Service(s.name.clone(), old));
        self.delta.services.insert(s.name.clone());
        self.committed.push(Change::UpsertService(s));
        Ok(())
    }

    /// Creates or replaces a frontend; its key must not belong to another
    /// service.
    pub fn upsert_frontend(&mut self, f: Frontend) -> Result<(), ValidationError> {
        match self.state.frontends.get(&f.key) {
            Some(old) if *old == f => return Ok(()),
            Some(old) if old.service != f.service => {
                return Err(ValidationError {
                    kind: ErrorKind::AlreadyExists,
                    object: format!("frontend {}", f.key),
                    field: "service".into(),
                    message: format!("belongs to service {:?}; delete it there first", old.service),
                })
            }
            _ => {}
        }
        let old = self.state.frontends.insert(f.key, f.clone());
        if let (None, Some(index)) = (&old, &mut self.frontends_by_service) {
            index.entry(f.service.clone()).or_default().insert(f.key);
        }
        self.undo.push(Undo::Frontend(f.key, old));
        self.touched_frontends.push(f.key);
        self.delta.frontends_changed = true;
        self.committed.push(Change::UpsertFrontend(f));
        Ok(())
    }

    /// Creates or replaces a backend.
    pub fn upsert_backend(&mut self, b: Backend) -> Result<(), ValidationError> {
        if self.state.backends.get(&b.key) == Some(&b) {
            return Ok(());
        }
        let old = self.state.backends.insert(b.key.clone(), b.clone());
        self.undo.push(Undo::Backend(b.key.clone(), old));
        self.delta.services.insert(b.key.service.clone());
        self.touched_backends.push(b.key.clone());
        self.committed.push(Change::UpsertBackend(b));
        Ok(())
    }

    /// Deletes a service with its frontends and backends.
    pub fn delete_service(&mut self, name: &str) -> Result<(), ValidationError> {
        if !self.state.services.contains_key(name) {
            return Err(not_found(format!("service {name:?}"), "name", "no such service"));
        }
        let state = &*self.state;
        let index = self.frontends_by_service.get_or_insert_with(|| {
            let mut index: HashMap<String, BTreeSet<FrontendKey>> = HashMap::new();
            for f in state.frontends.values() {
                index.entry(f.service.clone()).or_default().insert(f.key);
            }
            index
        });
        let frontends = index.remove(name).unwrap_or_default();
        for k in frontends {
            self.delete_frontend(&k)?;
        }
        let backends: Vec<BackendKey> = backends_of(self.state, name).map(|b| b.key.clone()).collect();
        for k in backends {
            self.delete_backend(&k)?;
        }
        let old = self.state.services.remove(name);
        self.undo.push(Undo::Service(name.to_string(), old));
        self.delta.services.insert(name.to_string());
        self.committed.push(Change::DeleteService(name.to_string()));
        Ok(())
    }

    /// Deletes a frontend.
    pub fn delete_frontend(&mut self, key: &FrontendKey) -> Result<(), ValidationError> {
        let Some(old) = self.state.frontends.remove(key) else {
            return Err(not_found(format!("frontend {key}"), "key", "no such frontend"));
        };
        if let Some(keys) = self
            .frontends_by_service
            .as_mut()
            .and_then(|index| index.get_mut(&old.service))
        {
            keys.remove(key);
        }
        self.undo.push(Undo::Frontend(*key, Some(old)));
        self.delta.deleted_frontends.push(*key);
        self.delta.frontends_changed = true;
        self.committed.push(Change::DeleteFrontend(*key));
        Ok(())
    }

    /// Deletes a backend.
    pub fn delete_backend(&mut self, key: &BackendKey) -> Result<(), ValidationError> {
        let Some(old) = self.state.backends.remove(key) else {
            return Err(not_found(format!("backend {key}"), "key", "no such backend"));
        };
        self.undo.push(Undo::Backend(key.clone(), Some(old)));
        self.delta.services.insert(key.service.clone());
        self.delta.deleted_backends.push(key.clone());
        self.committed.push(Change::DeleteBackend(key.clone()));
        Ok(())
    }

    /// The cross-object rules on the result (see the module doc).
    pub fn check(&self) -> Result<(), ValidationError> {
        for k in &self.touched_frontends {
            if let Some(f) = self.state.frontends.get(k) {
                if !self.state.services.contains_key(&f.service) {
                    return Err(not_found(
                        format!("frontend {k}"),
                        "service",
                        format!("no service {:?}", f.service),
                    ));
                }
            }
        }
        for k in &self.touched_backends {
            if self.state.backends.contains_key(k) && !self.state.services.contains_key(&k.service) {
                return Err(not_found(
                    format!("backend {k}"),
                    "service",
                    format!("no service {:?}", k.service),
                ));
            }
        }
        for name in &self.delta.services {
            let n = backends_of(self.state, name)
                .take(MAX_BACKENDS_PER_SERVICE + 1)
                .count();
            if n > MAX_BACKENDS_PER_SERVICE {
                return Err(ValidationError {
                    kind: ErrorKind::Precondition,
                    object: format!("service {name:?}"),
                    field: "backends".into(),
                    message: format!("more than {MAX_BACKENDS_PER_SERVICE} backends"),
                });
            }
        }
        Ok(())
    }

    /// Keeps the changes.
    pub fn commit(self) -> (Vec<Change>, Delta) {
        (self.committed, self.delta)
    }

    /// Undoes every change, newest first.
    pub fn rollback(self) {
        for u in self.undo.into_iter().rev() {
            match u {
                Undo::Service(k, Some(v)) => {
                    self.state.services.insert(k, v);
                }
                Undo::Service(k, None) => {
                    self.state.services.remove(&k);
                }
                Undo::Frontend(k, Some(v)) => {
                    self.state.frontends.insert(k, v);
                }
                Undo::Frontend(k, None) => {
                    self.state.frontends.remove(&k);
                }
                Undo::Backend(k, Some(v)) => {
                    self.state.backends.insert(k, v);
                }
                Undo::Backend(k, None) => {
                    self.state.backends.remove(&k);
                }
            }
        }
    }
}

/// Checks a whole state as if every object had just been written (used for
/// a loaded state file): per-object validation, then the cross-object rules.
pub fn validate_state(state: &DesiredState) -> Result<(), ValidationError> {
    for (name, s) in &state.services {
        s.validate()?;
        if *name != s.name {
            return Err(ValidationError::invalid(
                format!("service {:?}", s.name),
                "name",
                format!("listed under {name:?}"),
            ));
        }
    }
    for f in state.frontends.values() {
        f.validate()?;
        if !state.services.contains_key(&f.service) {
            return Err(not_found(
                format!("frontend {}", f.key),
                "service",
                format!("no service {:?}", f.service),
            ));
        }
    }
    for b in state.backends.values() {
        b.validate()?;
        if !state.services.contains_key(&b.key.service) {
            return Err(not_found(
                format!("backend {}", b.key),
                "service",
                format!("no service {:?}", b.key.service),
            ));
        }
    }
    for name in state.services.keys() {
        if backends_of(state, name)
            .take(MAX_BACKENDS_PER_SERVICE + 1)
            .count()
            > MAX_BACKENDS_PER_SERVICE
        {
            return Err(ValidationError {
                kind: ErrorKind::Precondition,
                object: format!("service {name:?}"),
                field: "backends".into(),
                message: format!("more than {MAX_BACKENDS_PER_SERVICE} backends"),
            });
        }
    }
    Ok(())
}
