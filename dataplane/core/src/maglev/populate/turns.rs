//! The turn order of the population: rounds of the weighted credit scheme
//! (see [`MaglevRing::build`](crate::maglev::MaglevRing::build)), handed out
//! in windows.
//!
//! Backends of equal weight have equal credit all along, so credit is kept
//! per distinct weight (a *class*): a round costs one check per class, and
//! when a single class fires (one heavy backend among many light ones) the
//! round is that class's members, without a scan of every backend. With
//! equal weights every round is every backend, a [`Window::Range`].
//!
//! Invariant: a window holds consecutive turns of one round, so no backend
//! appears in it twice, in canonical (turn) order.

use super::{Entrant, Strides, Turn, Walker};

/// Consecutive turns of one round, hence of distinct backends.
#[derive(Debug, Clone, Copy)]
pub(super) enum Window<'a> {
    /// Backends `a..b`, of a round in which every backend takes a turn.
    Range(usize, usize),
    /// These backends.
    List(&'a [u32]),
}

impl Window<'_> {
    pub(super) fn len(&self) -> usize {
        match *self {
            Window::Range(a, b) => b - a,
            Window::List(l) => l.len(),
        }
    }

    /// The backend of the window's turn `j`.
    #[inline(always)]
    pub(super) fn walker(&self, j: usize) -> usize {
        match *self {
            Window::Range(a, _) => a + j,
            Window::List(l) => l[j] as usize,
        }
    }

    /// Runs `t` on the walker and strides of each turn, in order. A range
    /// iterates its slices with no bounds check per turn.
    #[inline(always)]
    pub(super) fn for_each(&self, walkers: &mut [Walker], strides: &[Strides], t: &mut impl Turn) {
        match *self {
            Window::Range(a, b) => {
                for (w, s) in walkers[a..b].iter_mut().zip(&strides[a..b]) {
                    t.turn(w, s);
                }
            }
            Window::List(l) => {
                for &i in l {
                    t.turn(&mut walkers[i as usize], &strides[i as usize]);
                }
            }
        }
    }
}

/// The turn order: rounds of the weighted credit scheme, handed out in
/// windows of distinct backends.
#[derive(Debug)]
pub(super) struct Turns {
    /// The distinct weights, and each one's credit.
    class_weight: Vec<u64>,
    class_credit: Vec<u64>,
    /// Which classes take turns in the current round.
    class_fired: Vec<bool>,
    /// The backends of each class, in canonical order.
    members: Vec<Vec<u32>>,
    /// Each backend's class.
    class_of: Vec<u32>,
    max_w: u64,
    /// A round built by a scan, when several (not all) classes fire.
    scratch: Vec<u32>,
    /// Which backends take turns in the current round.
    round: Round,
    /// Next turn of the current round.
    at: usize,
}

#[derive(Debug, Clone, Copy)]
enum Round {
    /// Every backend.
    All,
    /// The members of one class.
    Class(usize),
    /// `scratch`.
    Scratch,
}

impl Turns {
    pub(super) fn new(entrants: &[Entrant]) -> Self {
        let mut weights: Vec<u32> = entrants.iter().map(|e| e.weight).collect();
        weights.sort_unstable();
        weights.dedup();
        let class_of: Vec<u32> = entrants
            .iter()
            .map(|e| weights.binary_search(&e.weight).expect("listed") as u32)
            .collect();
        let mut members = vec![Vec::new(); weights.len()];
        for (i, &c) in class_of.iter().enumerate() {
            members[c as usize].push(i as u32);
        }
        Turns {
            max_w: u64::from(*weights.last().expect("non-empty")),
            class_credit: vec![0; weights.len()],
            class_fired: vec![false; weights.len()],
            class_weight: weights.into_iter().map(u64::from).collect(),
            members,
            class_of,
            scratch: Vec::with_capacity(entrants.len()),
            round: Round::All,
            // Start "after the end" so that the first call runs round one.
            at: usize::MAX,
        }
    }

    fn round_len(&self) -> usize {
        match self.round {
            Round::All => self.class_of.len(),
            Round::Class(c) => self.members[c].len(),
            Round::Scratch => self.scratch.len(),
        }
    }

    /// Runs the credit scheme for one round and points `round` at its turns.
    fn next_round(&mut self) {
        let (mut count, mut last) = (0usize, 0usize);
        for c in 0..self.class_weight.len() {
            let credit = self.class_credit[c] + self.class_weight[c];
            let fire = credit >= self.max_w;
            self.class_credit[c] = if fire { credit - self.max_w } else { credit };
            self.class_fired[c] = fire;
            if fire {
                count += 1;
                last = c;
            }
        }
        // The class of weight max_w fires every round: count ≥ 1.
        self.round = if count == self.class_weight.len() {
            Round::All
        } else if count == 1 {
            Round::Class(last)
        } else {
            let fired = &self.class_fired;
            self.scratch.clear();
            self.scratch.extend(
                self.class_of
                    .iter()
                    .enumerate()
                    .filter(|&(_, &c)| fired[c as usize])
                    .map(|(i, _)| i as u32),
            );
            Round::Scratch
        };
        self.at = 0;
    }

    /// The next at most `cap` (≥ 1) turns, all of one round, hence distinct.
    pub(super) fn window(&mut self, cap: usize) -> Window<'_> {
        if self.at >= self.round_len() {
            self.next_round();
        }
        let at = self.at;
        let end = self.round_len().min(at + cap);
        self.at = end;
        match self.round {
            Round::All => Window::Range(at, end),
            Round::Class(c) => Window::List(&self.members[c][at..end]),
            Round::Scratch => Window::List(&self.scratch[at..end]),
        }
    }
}
