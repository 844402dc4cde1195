//! L7 structural classifier. Work in progress.

use crate::model::{Classification, Definition};

pub(crate) fn classify(_def: &Definition) -> Classification {
    Classification::Stateless
}
