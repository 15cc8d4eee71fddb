{#- One row per order event_id, as stored: the ingest chain keeps an event_id's first copy
    only (sql/README.md, "Exactly-once counting"; the raw table's `unique` test says so in
    `dbt build`), so nothing here picks among copies. Voided orders (sql/0026) are left out. -#}

with

source as (

    select * from {{ source('toplist', 'orders') }}
    where event_id not in (select event_id from {{ source('toplist', 'order_voids') }})

)

select event_id, order_id, product_id, buyer_id, units, amount_cents, event_time
from source
