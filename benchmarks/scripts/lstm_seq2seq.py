"""keras-io's character-level LSTM seq2seq (`examples/nlp/lstm_seq2seq.py`)
on synthetic one-hot data of its shapes: 10,000 pairs of 16 and 59
characters over 71 and 93 tokens, latent 256, batch 64, validation 20%.

Usage: lstm_seq2seq.py [EPOCHS]
"""

import sys

import keras
import numpy as np

EPOCHS = int(sys.argv[1]) if len(sys.argv) > 1 else 1
BATCH, LATENT, SAMPLES = 64, 256, 10_000
ENC_LEN, DEC_LEN, ENC_TOKENS, DEC_TOKENS = 16, 59, 71, 93
rng = np.random.default_rng(0)


def one_hot(length, tokens):
    out = np.zeros((SAMPLES, length, tokens), dtype="float32")
    index = rng.integers(0, tokens, (SAMPLES, length))
    np.put_along_axis(out, index[..., None], 1.0, axis=2)
    return out


encoder_data = one_hot(ENC_LEN, ENC_TOKENS)
decoder_data = one_hot(DEC_LEN, DEC_TOKENS)
target_data = one_hot(DEC_LEN, DEC_TOKENS)

encoder_inputs = keras.Input(shape=(None, ENC_TOKENS))
_, state_h, state_c = keras.layers.LSTM(LATENT, return_state=True)(
    encoder_inputs
)
decoder_inputs = keras.Input(shape=(None, DEC_TOKENS))
decoder = keras.layers.LSTM(LATENT, return_sequences=True, return_state=True)
outputs, _, _ = decoder(decoder_inputs, initial_state=[state_h, state_c])
outputs = keras.layers.Dense(DEC_TOKENS, activation="softmax")(outputs)
model = keras.Model([encoder_inputs, decoder_inputs], outputs)
model.compile(
    optimizer="rmsprop", loss="categorical_crossentropy", metrics=["accuracy"]
)
model.fit(
    [encoder_data, decoder_data],
    target_data,
    batch_size=BATCH,
    epochs=EPOCHS,
    validation_split=0.2,
    verbose=0,
)
