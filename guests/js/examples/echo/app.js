// Acks every delivery: the smallest handler (the JavaScript twin of
// guests/echo).

import { Ack, handler } from "rheo-handler";

handler(() => Ack());
