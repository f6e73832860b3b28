//! Acks every delivery, built straight against the first version of the
//! contract, `rheo:handler@0.1.0` (`wit/deps/handler-0.1.0/`), which
//! exports `handle` only: a component from before `handle-batch`, kept to
//! show that such components keep running unchanged.

wit_bindgen::generate!({
    path: "../../wit/deps/handler-0.1.0",
    world: "handler",
});

struct Classic;

impl Guest for Classic {
    fn handle(_delivery: Delivery) -> Outcome {
        Outcome::Ack
    }
}

export!(Classic);
