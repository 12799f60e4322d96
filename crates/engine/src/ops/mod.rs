//! One command's work each, used only by the cli: inspection, scan, removal, gc,
//! doctor, project mode, evaluations.

pub mod approvals;
pub mod doctor;
pub mod eval;
pub mod gc;
pub mod inspect;
pub mod project;
pub mod prompt;
pub mod removal;
pub mod scan;
