"""The "XLA" tab in TensorBoard: a dynamic plugin over the report the
tuner writes with the plugin's name (`metadata`), its routes
(`plugin`), the views they serve (`views`), and its static page
(`static/`: an ES module, CSS, inline SVG).

Importing this package imports neither TensorFlow nor TensorBoard.
"""
