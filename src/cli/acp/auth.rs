//! Authentication as ACP has it: offshoot has nothing to log in to. A provider's key is
//! read from the variable its config names, in the environment the editor starts
//! `offshoot acp` with; one method says so, and a session that needs a key not set is
//! refused with `auth_required`, naming the variable.

use agent_client_protocol::v1::schema::{AuthMethod, AuthMethodAgent, AuthenticateRequest, AuthenticateResponse};
use agent_client_protocol::{Error, ErrorCode};

use engine::step::model::{self, ModelError};
use engine::store::workspace::Workspace;

use super::{Shared, invalid};

/// The one method: the key in the environment.
const ENVIRONMENT: &str = "environment";

pub(super) fn methods() -> Vec<AuthMethod> {
    let method = AuthMethodAgent::new(ENVIRONMENT, "The model provider's API key, from the environment").description(
        "offshoot reads each provider's key from the variable offshoot.toml names for it \
         (ANTHROPIC_API_KEY for the default provider). Set it in the environment the editor \
         starts `offshoot acp` with; nothing is entered or stored here.",
    );
    vec![AuthMethod::Agent(method)]
}

/// `authenticate`: nothing to do when the keys are there; the missing one named when a
/// session was refused for it (the process's environment does not change: the editor
/// must start the agent again with it).
pub(super) fn authenticate(shared: &Shared, request: &AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
    if request.method_id.to_string() != ENVIRONMENT {
        return Err(invalid(format!("no authentication method `{}` (there is `{ENVIRONMENT}`)", request.method_id)));
    }
    match shared.missing_key.lock().ok().and_then(|m| m.clone()) {
        Some(missing) => Err(Error::new(ErrorCode::AUTH_REQUIRED, missing)),
        None => Ok(AuthenticateResponse::new()),
    }
}

/// `auth_required` if the provider a new agent in `ws` would call first has no key in
/// the environment; the words are kept for `authenticate`.
pub(super) fn check(shared: &Shared, ws: &Workspace) -> Result<(), Error> {
    let Ok((_, config)) = ws.config("default") else { return Ok(()) };
    let env = shared.ctx.lock().map(|ctx| ctx.env.clone()).map_err(super::internal)?;
    let Err(ModelError::MissingKey { provider, var }) = model::plan(&config, "default", "worker", &env) else {
        return Ok(());
    };
    let missing = format!(
        "provider `{provider}` needs an API key in `{var}`, which is not set in the environment \
         `offshoot acp` was started with: set it where the editor starts the agent, then start it again"
    );
    if let Ok(mut kept) = shared.missing_key.lock() {
        *kept = Some(missing.clone());
    }
    Err(Error::new(ErrorCode::AUTH_REQUIRED, missing))
}
