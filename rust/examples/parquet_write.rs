//! The arrow-rs side of `benchmarks/parquet_writers.py`: write the record batches of an Arrow
//! IPC stream to Parquet with the `parquet` crate, encoded as `amqpcap.table_files.parquet_options`
//! asks of pyarrow (the benchmark passes its three lists: the columns with statistics, with a
//! dictionary, and DELTA_BINARY_PACKED), snappy pages, one row group per batch; and print the
//! best time of `repeat` writes in seconds.
//!
//! cargo run --release --example parquet_write --features parquet-bench -- \
//!     IN.arrow OUT.parquet REPEAT STATISTICS DICTIONARY DELTA   (each list comma-separated)

use std::fs::File;
use std::time::Instant;

use arrow_ipc::reader::StreamReader;
use arrow_schema::Schema;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

/// The comma-separated column names of one list.
fn list(s: &str) -> Vec<&str> {
    s.split(',').filter(|c| !c.is_empty()).collect()
}

/// The columns `parquet_options` gives each option, as the benchmark passes them.
struct Options<'a> {
    statistics: Vec<&'a str>,
    dictionary: Vec<&'a str>,
    delta: Vec<&'a str>,
}

fn properties(schema: &Schema, batch_rows: usize, o: &Options<'_>) -> WriterProperties {
    let mut b = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::None)
        .set_max_row_group_size(batch_rows.max(1));
    for f in schema.fields() {
        let (name, path) = (f.name().as_str(), ColumnPath::from(f.name().as_str()));
        if o.dictionary.contains(&name) {
            b = b.set_column_dictionary_enabled(path.clone(), true);
        }
        if o.delta.contains(&name) {
            b = b.set_column_encoding(path.clone(), Encoding::DELTA_BINARY_PACKED);
        }
        if o.statistics.contains(&name) {
            b = b.set_column_statistics_enabled(path, EnabledStatistics::Chunk);
        }
    }
    b.build()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, input, output, repeat, statistics, dictionary, delta] = args.as_slice() else {
        return Err("usage: parquet_write IN.arrow OUT.parquet REPEAT STATISTICS DICTIONARY DELTA".into());
    };
    let options = Options { statistics: list(statistics), dictionary: list(dictionary), delta: list(delta) };
    let reader = StreamReader::try_new(std::io::BufReader::new(File::open(input)?), None)?;
    let schema = reader.schema();
    let batches = reader.collect::<Result<Vec<_>, _>>()?;
    let batch_rows = batches.iter().map(|b| b.num_rows()).max().unwrap_or(1);
    let mut best = f64::INFINITY;
    for _ in 0..repeat.parse::<usize>()? {
        let start = Instant::now();
        let mut w = ArrowWriter::try_new(File::create(output)?, schema.clone(), Some(properties(&schema, batch_rows, &options)))?;
        for b in &batches {
            w.write(b)?;
            w.flush()?; // a row group per batch, as pyarrow's writer makes one per write
        }
        w.close()?;
        best = best.min(start.elapsed().as_secs_f64());
    }
    println!("{best:.4}");
    Ok(())
}
