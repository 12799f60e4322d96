//! One command's work each, used only by the cli: inspection, scan, removal, gc,
//! doctor, project mode (and its agents that work in place), evaluations.

pub mod approvals;
pub mod doctor;
pub mod eval;
pub mod gc;
pub mod in_place;
pub mod inspect;
pub mod project;
pub mod prompt;
pub mod refusal;
pub mod removal;
pub mod scan;
